"""The P/D horizon in one pass (Simulation.horizon, Disaggregation.horizon) against the list form it
replaced: every time a worker asks, on random P/D workloads, the same time."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim.cluster.simulation import Simulation
from servesim.engine.worker import Worker
import servesim
from tests.support.runs import write_trace
from tests.test_fast_engine import TIMINGS, _config, steady_scenarios
from tests.test_pd_runs import _pd


def _listed_horizon(sim: Simulation, worker) -> int | None:
    """The horizon as it was computed before (lists of candidate times, then their minimum)."""
    times = [sim._feed_time, worker.next_engine_arrival(), sim._until, sim._next_sync]
    if sim._inputs_due:
        times.append(sim._inputs_due[0])
    pd = sim.disaggregation
    if pd is not None:
        times.append(pd.next_transfer_done())
        if worker.role == "decode":
            times.extend(w.next_output_bound(sim.now) for w in pd.prefill_workers)
            times.extend(w.executing.end_ns for w in pd.decode_workers
                         if w is not worker and w.executing is not None and pd.pending.get(w.name))
    times = [t for t in times if t is not None]
    return min(times) if times else None


def _checked(monkeypatch) -> dict[str, int]:
    """Simulation.horizon, asserting at every call that it equals the listed form; counts the
    calls under P/D by the asking worker's role."""
    asked = {"decode": 0, "prefill": 0}
    horizon = Simulation.horizon

    def checked(self, worker):
        got = horizon(self, worker)
        assert got == _listed_horizon(self, worker)
        if self.disaggregation is not None and self.scheduled_arrivals:
            asked[worker.role] += 1
        return got

    monkeypatch.setattr(Simulation, "horizon", checked)
    return asked


def _transfer(latency_ms: float, bandwidth_gb_s: float, first_token_from: str) -> dict:
    return {"bandwidth_gb_s": bandwidth_gb_s, "latency_ms": latency_ms, "first_token_from": first_token_from}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steady_scenarios(), TIMINGS, st.data())
def test_pd_horizon_matches_the_listed_form(tmp_path, monkeypatch, scenario, timing, data):
    """Open loop (the horizon's P/D part is asked only with scheduled arrivals), 1-3 prefill and
    2-3 decode workers, transfers short and long."""
    rows, sched, _, trace_block_size = scenario
    trace = write_trace(tmp_path / "t.jsonl", rows)
    config = _config(trace, sched, {"mode": "open_loop"}, trace_block_size, timing)
    transfer = _transfer(*data.draw(st.sampled_from([(0.5, 50.0), (17.0, 1.0), (55.0, 0.01)])),
                         data.draw(st.sampled_from(["prefill", "decode"])))
    config = _pd(config, data.draw(st.sampled_from([1, 2, 3])), data.draw(st.sampled_from([2, 3])), transfer)
    _checked(monkeypatch)
    servesim.simulate(config)


def test_pd_horizon_is_asked_by_decode_workers(tmp_path, monkeypatch):
    """A pinned case where decode workers try runs while prefill passes and transfers are in
    flight, so the one-pass form's every branch is compared (and the prefill pass skipped at
    the bound is met)."""
    rows = [{"timestamp": round(7.7 * i, 3), "input_length": 40 + 37 * (i % 7), "output_length": 60 + 13 * (i % 5)}
            for i in range(60)]
    sched = {"block_size": 16, "max_model_len": 512, "num_gpu_blocks": 2000, "max_num_seqs": 32,
             "max_num_batched_tokens": 512, "enable_prefix_caching": False, "async_scheduling": True}
    config = _config(write_trace(tmp_path / "t.jsonl", rows), sched, {"mode": "open_loop"}, 32,
                     {"kind": "fixed", "pass_ms": 10.0})
    config = _pd(config, 2, 3, _transfer(17.0, 1.0, "prefill"))
    asked = _checked(monkeypatch)
    bounds = []
    next_output_bound = Worker.next_output_bound

    def counted(self, now):
        bounds.append(self.name)
        return next_output_bound(self, now)

    monkeypatch.setattr(Worker, "next_output_bound", counted)
    servesim.simulate(config)
    assert asked["decode"] > 50
    # The listed form asks both prefill workers at every decode call; the one-pass form skips
    # a prefill pass that ends at or past the bound, so it asks fewer.
    one_pass = len(bounds) - 2 * asked["decode"]
    assert 0 < one_pass < 2 * asked["decode"]
