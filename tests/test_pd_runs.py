"""Decode runs under prefill/decode disaggregation: past quiet finishes, cut only by what reaches them.

A decode worker's finish is quiet while no handoff waits for its blocks and arrivals follow a
schedule; its horizon counts its own transfers' ends, prefill passes that sample, and other
events only through a prefill pass they could start (cluster/disaggregation.py). Held to the
reference engine on random P/D workloads, and pinned on a hand-checked case.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import servesim
from tests.support.equivalence import assert_same
from tests.support.runs import write_trace
from tests.test_fast_engine import TIMINGS, _config, steady_scenarios


def _pd(config, prefill: int, decode: int, transfer: dict, policy: str = "round_robin") -> dict:
    sched = config["engine"]["workers"]["aggregated"]["scheduler"]
    config["engine"]["workers"] = {"prefill": {"count": prefill, "scheduler": dict(sched)},
                                   "decode": {"count": decode, "scheduler": dict(sched)}}
    config["engine"]["kv_transfer"] = transfer
    config["router"] = {"policy": policy}
    return config


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steady_scenarios(), TIMINGS, st.data())
def test_decode_runs_match_the_reference_disaggregated(tmp_path, scenario, timing, data):
    """Long decodes on 1-2 prefill and 2-3 decode workers: runs past finishes, transfers to
    other workers inside a run, back-pressure from small decode pools."""
    rows, sched, client, trace_block_size = scenario
    trace = write_trace(tmp_path / "t.jsonl", rows)
    config = _config(trace, sched, client, trace_block_size, timing)
    latency_ms, bandwidth_gb_s = data.draw(st.sampled_from([(0.5, 50.0), (17.0, 1.0), (55.0, 0.01)]))
    transfer = {"bandwidth_gb_s": bandwidth_gb_s, "latency_ms": latency_ms,
                "first_token_from": data.draw(st.sampled_from(["prefill", "decode"]))}
    assert_same(_pd(config, data.draw(st.sampled_from([1, 2])), data.draw(st.sampled_from([2, 3])), transfer,
                    data.draw(st.sampled_from(["round_robin", "kv_aware"]))))


def _decode_records(monkeypatch) -> list[tuple[str, int, int]]:
    """(worker, end ns, passes) of every pass or run a worker executes."""
    from servesim.engine.worker import Worker

    records = []
    on_pass_end = Worker.on_pass_end

    def recording_on_pass_end(self, now, done):
        records.append((self.name, done.end_ns, 1 if done.run is None else done.run.steps))
        on_pass_end(self, now, done)

    monkeypatch.setattr(Worker, "on_pass_end", recording_on_pass_end)
    return records


@pytest.mark.parametrize("client", ["open_loop", "closed_loop"])
def test_a_decode_run_goes_on_past_a_quiet_finish(tmp_path, monkeypatch, client):
    """1 prefill + 1 decode worker, fixed 10 ms passes, sync scheduling. R0 (3 output tokens)
    and R1 (18) arrive at 0; the prefill pass [0, 10) samples both first tokens and hands both
    over; their transfers (equal prompts) end together at T. Decode pass 1 [T, T+10) admits
    both and samples their 2nd tokens; pass 2 their 3rd, R0's last; passes 3-17 R1's 4th-18th.
    Open loop, nothing waiting on the worker: passes 2-17 are one run of 16 (its finish at
    T+20 reported on the way). A closed-loop client could send a request at R0's finish: the
    run stops there (pass 2 alone, then a run of 15)."""
    records = _decode_records(monkeypatch)
    rows = [{"timestamp": 0.0, "input_length": 4, "output_length": 3},
            {"timestamp": 0.0, "input_length": 4, "output_length": 18}]
    sched = {"async_scheduling": False, "enable_prefix_caching": False, "block_size": 4, "num_gpu_blocks": 64,
             "max_num_seqs": 8, "max_num_batched_tokens": 64, "max_model_len": 64}
    trace = write_trace(tmp_path / "t.jsonl", rows)
    mode = {"mode": "open_loop"} if client == "open_loop" else {"mode": "closed_loop", "concurrency": 2}
    config = _pd(_config(trace, sched, mode, 4, {"kind": "fixed", "pass_ms": 10.0}), 1, 1,
                 {"bandwidth_gb_s": 50.0, "latency_ms": 0.5, "first_token_from": "prefill"})
    fast = assert_same(config)
    records.clear()   # assert_same ran the reference too
    servesim.simulate(config)
    ends = {r.transfer_end_ns for r in fast.requests}
    assert len(ends) == 1
    t = ends.pop()
    decode = [(end - t, steps) for name, end, steps in records if name == "decode-0"]
    ms = 10_000_000
    if client == "open_loop":
        assert decode == [(ms, 1), (17 * ms, 16)]
    else:
        assert decode == [(ms, 1), (2 * ms, 1), (17 * ms, 15)]
