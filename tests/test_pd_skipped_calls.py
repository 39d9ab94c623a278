"""A P/D decode worker's scheduler call behind a pass it starts at a pass end, left out.

Under disaggregation a decode worker with async scheduling commits each follow-up pass at the
end of the pass before it (engine/worker.py's `commit_at_pass_end`), so the scheduler call it
used to push behind the pass it starts there found that pass in flight and did nothing. With a
scheduled client no horizon reads the pending events, and the call is not pushed
(`Worker._calls_unseen`). These tests hold the runs without it to the runs with it: the same
requests, summaries (KV timelines and utilisation too) and pass logs; and they check that calls
were left out where they may be, and none where a horizon reads the pending events (closed loop).
"""

from __future__ import annotations

import copy
import io

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import servesim
from servesim.cluster.simulation import Simulation
from servesim.engine.worker import Worker
from servesim.errors import ServesimError
from tests.support.runs import write_trace
from tests.test_fast_engine import TIMINGS, _config, steady_scenarios
from tests.test_pd_runs import _pd


def _run(config, monkeypatch, skip: bool):
    """(result, pass log, scheduler calls pushed) with the call skipped as built, or never."""
    pushed = []
    push = Simulation.push_scheduler_call
    attach = Worker.attach

    def counted(self, t, worker):
        pushed.append(worker.name)
        push(self, t, worker)

    def attach_without_skip(self, events):
        attach(self, events)
        self._calls_unseen = False

    monkeypatch.setattr(Simulation, "push_scheduler_call", counted)
    if not skip:
        monkeypatch.setattr(Worker, "attach", attach_without_skip)
    log = io.StringIO()
    result = servesim.simulate(copy.deepcopy(config), pass_log=log)
    monkeypatch.undo()
    return result, log.getvalue(), pushed


def _refusal(config, monkeypatch, skip: bool) -> str | None:
    try:
        _run(config, monkeypatch, skip)
    except ServesimError as err:
        monkeypatch.undo()
        return str(err)
    return None


def _assert_same(config, monkeypatch) -> int:
    """The outputs with and without the skip are equal, or both runs refuse alike (a pool too
    small for a request); returns the calls left out."""
    refused = _refusal(config, monkeypatch, skip=False)
    if refused is not None:
        assert _refusal(config, monkeypatch, skip=True) == refused
        return 0
    new, new_log, new_calls = _run(config, monkeypatch, skip=True)
    old, old_log, old_calls = _run(config, monkeypatch, skip=False)
    assert new.requests == old.requests
    a = {k: v for k, v in new.summary.items() if k != "wall_time_ms"}
    b = {k: v for k, v in old.summary.items() if k != "wall_time_ms"}
    assert a == b   # kv_timeline and kv_utilization_mean included: every pass record is there
    assert new_log == old_log
    return len(old_calls) - len(new_calls)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steady_scenarios(), TIMINGS, st.data())
def test_skipped_calls_change_nothing(tmp_path, monkeypatch, scenario, timing, data):
    """Random P/D workloads (1-2 prefill, 2-3 decode workers, short and long transfers, open and
    closed loop, the fast and the reference engine): the same outputs with the calls left out."""
    rows, sched, client, trace_block_size = scenario
    config = _config(write_trace(tmp_path / "t.jsonl", rows), sched, client, trace_block_size, timing)
    latency_ms, bandwidth_gb_s = data.draw(st.sampled_from([(0.5, 50.0), (17.0, 1.0), (55.0, 0.01)]))
    transfer = {"bandwidth_gb_s": bandwidth_gb_s, "latency_ms": latency_ms,
                "first_token_from": data.draw(st.sampled_from(["prefill", "decode"]))}
    config = _pd(config, data.draw(st.sampled_from([1, 2])), data.draw(st.sampled_from([2, 3])), transfer)
    config["engine"]["reference"] = data.draw(st.booleans())
    skipped = _assert_same(config, monkeypatch)
    if client["mode"] == "closed_loop" or not sched["async_scheduling"]:
        assert skipped == 0   # a closed loop's horizon is the next pending event; sync calls do work


def _pinned(tmp_path, client: dict) -> dict:
    rows = [{"timestamp": round(7.7 * i, 3), "input_length": 40 + 37 * (i % 7), "output_length": 60 + 13 * (i % 5)}
            for i in range(40)]
    sched = {"block_size": 16, "max_model_len": 512, "num_gpu_blocks": 2000, "max_num_seqs": 32,
             "max_num_batched_tokens": 512, "enable_prefix_caching": False, "async_scheduling": True}
    config = _config(write_trace(tmp_path / "t.jsonl", rows), sched, client, 32, {"kind": "fixed", "pass_ms": 10.0})
    return _pd(config, 2, 3, {"bandwidth_gb_s": 1.0, "latency_ms": 17.0, "first_token_from": "prefill"})


def test_one_request_skips_one_call_per_follow_up(tmp_path, monkeypatch):
    """Counted by hand: one request of 3 output tokens on 1 prefill + 1 decode worker (fixed 10 ms,
    async, first token from the prefill side). The decode worker's first pass starts at a
    scheduler call (the transfer's wake); at its end it commits and starts the second pass, whose
    call behind it is left out; that pass's end finds nothing to commit and pushes a call. So one
    call fewer, and the same outputs."""
    rows = [{"timestamp": 0.0, "input_length": 20, "output_length": 3}]
    sched = {"block_size": 16, "max_model_len": 512, "num_gpu_blocks": 100, "max_num_seqs": 8,
             "max_num_batched_tokens": 512, "enable_prefix_caching": False, "async_scheduling": True}
    config = _config(write_trace(tmp_path / "t.jsonl", rows), sched, {"mode": "open_loop"}, 32,
                     {"kind": "fixed", "pass_ms": 10.0})
    config = _pd(config, 1, 1, {"bandwidth_gb_s": 50.0, "latency_ms": 0.5, "first_token_from": "prefill"})
    assert _assert_same(config, monkeypatch) == 1


def test_pinned_open_loop_skips_and_closed_loop_does_not(tmp_path, monkeypatch):
    """Open loop: many calls are left out (every follow-up a decode worker starts at a pass end);
    closed loop (a horizon that reads the pending events): none."""
    assert _assert_same(_pinned(tmp_path, {"mode": "open_loop"}), monkeypatch) > 50
    assert _assert_same(_pinned(tmp_path, {"mode": "closed_loop", "concurrency": 8}), monkeypatch) == 0
