"""The fast engine's pass logs and token times against the reference's (engine/passes.py).

A pass log no longer forces the reference engine: the fast engine expands its decode
group and its fast-forwarded runs into the logical passes the reference runs. Its log
must equal the reference's, line for line, but for what differs by design
(docs/outputs.md): the order of lines between workers.
"""

from __future__ import annotations

import copy
import io
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import servesim
from tests.support.runs import write_trace
from tests.support.scenarios import as_backend, scenarios


def _logged(config, reference: bool, monkeypatch=None, detailed: bool = False):
    """(result, pass records by (worker, pass), the logical passes of runs after their first)."""
    from servesim.metrics.collector import Collector

    inside_runs: set[tuple[str, int]] = set()
    if monkeypatch is not None:
        on_pass = Collector.on_pass

        def recording_on_pass(self, worker, done):
            run = done.run
            if run is not None:
                first = 1 if run.opens else 0
                inside_runs.update((worker.name, done.index + i) for i in range(first, run.reported))
            on_pass(self, worker, done)

        monkeypatch.setattr(Collector, "on_pass", recording_on_pass)
    config = copy.deepcopy(config)
    config["engine"]["reference"] = reference
    log = io.StringIO()
    result = servesim.simulate(config, pass_log=log, detailed=detailed)
    records = [json.loads(line) for line in log.getvalue().splitlines()]
    if monkeypatch is not None:
        monkeypatch.undo()
    return result, {(r["worker"], r["pass"]): r for r in records}, inside_runs


def assert_same_pass_logs(config, monkeypatch) -> int:
    """The fast engine's log equals the reference's (sorted by worker and pass); returns how many
    of its logical passes came from fast-forwarded runs after their first (the fast path ran)."""
    fast, fast_log, inside = _logged(config, False, monkeypatch, detailed=True)
    reference, reference_log, _ = _logged(config, True, detailed=True)
    assert fast.summary["simulated"]["engine"] == "fast"
    assert list(fast_log) == sorted(fast_log) or len({w for w, _ in fast_log}) > 1
    assert fast_log.keys() == reference_log.keys()
    for key, ours in fast_log.items():
        theirs = reference_log[key]
        assert ours == theirs, key
        assert list(ours["scheduled"]) == list(theirs["scheduled"]), key   # the engine's order too
    # Per-request token times (--save-detailed) read the same logical passes.
    assert {k: list(v) for k, v in fast.token_times.items()} == {k: list(v) for k, v in reference.token_times.items()}
    assert fast.requests == reference.requests
    return len(inside)


def _config(tmp_path, rows, backend, scheduler, workers=None, timing=None, client=None):
    trace = write_trace(tmp_path / f"trace-{backend}.jsonl", rows)
    role = {"scheduler": scheduler}
    return {
        "engine": {"backend": backend, "timing": timing or {"kind": "fixed", "pass_ms": 10.0},
                   "workers": workers or {"aggregated": role}},
        "workload": {"trace": str(trace), "format": "mooncake", "trace_block_size": 4,
                     "client": client or {"mode": "open_loop"}, "warmup_requests": 2},
    }


POLY = {"kind": "polynomial", "base_ms": 1.0, "per_prefill_token_ms": 0.25, "per_decode_token_ms": 0.5,
        "per_context_token_ms": 0.001, "per_request_ms": 0.0}
ROWS = ([{"timestamp": 0.0, "input_length": 8 + 4 * i, "output_length": 6 + 7 * i, "hash_ids": [1, 2 + i]}
         for i in range(6)]
        + [{"timestamp": 95.0 + 3 * i, "input_length": 20, "output_length": 30 - 4 * i, "hash_ids": [1, 9]}
           for i in range(4)])
VLLM = {"block_size": 4, "num_gpu_blocks": 40, "max_model_len": 128, "max_num_seqs": 8,
        "max_num_batched_tokens": 64}
SGLANG = {"page_size": 4, "max_total_tokens": 160, "context_length": 128, "max_running_requests": 8,
          "chunked_prefill_size": 64}
TRTLLM = {"tokens_per_block": 4, "max_tokens": 160, "max_seq_len": 128, "max_batch_size": 8,
          "max_num_tokens": 64}


@pytest.mark.parametrize("backend,scheduler", [("vllm", VLLM), ("sglang", SGLANG), ("trtllm", TRTLLM)])
@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("timing", [None, POLY], ids=["fixed", "poly"])
def test_fast_pass_logs_equal_the_reference(tmp_path, monkeypatch, backend, scheduler, overlap, timing):
    key = {"vllm": "async_scheduling", "sglang": "disable_overlap_schedule", "trtllm": "disable_overlap_scheduler"}
    scheduler = dict(scheduler, **{key[backend]: overlap if backend == "vllm" else not overlap})
    inside = assert_same_pass_logs(_config(tmp_path, ROWS, backend, scheduler, timing=timing), monkeypatch)
    assert inside > 0   # the fast engine fast-forwarded some runs


def test_fast_pass_logs_equal_the_reference_under_pd_and_a_fleet(tmp_path, monkeypatch):
    pd = {"prefill": {"scheduler": VLLM}, "decode": {"scheduler": VLLM}}
    assert_same_pass_logs(_config(tmp_path, ROWS, "vllm", VLLM, workers=pd), monkeypatch)
    fleet = {"aggregated": {"count": 2, "scheduler": VLLM}}
    assert assert_same_pass_logs(_config(tmp_path, ROWS, "vllm", VLLM, workers=fleet), monkeypatch) > 0
    closed = _config(tmp_path, ROWS, "sglang", SGLANG, client={"mode": "closed_loop", "concurrency": 3})
    assert_same_pass_logs(closed, monkeypatch)


def test_a_run_past_a_finish_logs_every_pass(tmp_path, monkeypatch):
    """A vLLM run past a quiet finish, expanded: its early result and its tail, pass by pass."""
    rows = [{"timestamp": 0.0, "input_length": 4, "output_length": 3},
            {"timestamp": 0.0, "input_length": 4, "output_length": 6}]
    sched = {"async_scheduling": False, "enable_prefix_caching": False, "block_size": 4, "num_gpu_blocks": 64,
             "max_num_seqs": 8, "max_num_batched_tokens": 64, "max_model_len": 64}
    config = _config(tmp_path, rows, "vllm", sched)
    config["workload"]["warmup_requests"] = 0
    fast, log, inside = _logged(config, False, monkeypatch)
    # Fixed 10 ms passes. Pass 0 [0,10): both prompts (1 block each), both first tokens. Then one
    # run of passes 1-5: R0's 2nd and 3rd tokens at 20, 30 (it finishes at 30: the early result of
    # passes 1-2), R1's 2nd to 6th at 20 ... 60 (the tail, passes 3-5).
    assert [(p["pass"], p["start_ms"], p["end_ms"], p["scheduled"], p["finished"]) for p in log.values()] == [
        (0, 0.0, 10.0, {"0": 4, "1": 4}, []),
        (1, 10.0, 20.0, {"0": 1, "1": 1}, []),
        (2, 20.0, 30.0, {"0": 1, "1": 1}, [0]),
        (3, 30.0, 40.0, {"1": 1}, []),
        (4, 40.0, 50.0, {"1": 1}, []),
        (5, 50.0, 60.0, {"1": 1}, [1]),
    ]
    assert inside == {("aggregated-0", p) for p in (2, 3, 4, 5)}
    # Blocks of 4, 63 usable, counted right after each pass is scheduled. Pass 0 takes a block for
    # each prompt: 61 free; pass 1 (the run's first) a 2nd block each for position 4: 59; pass 2
    # none: 59. R0's 2 blocks are freed at its finish (the end of pass 2), so passes 3 and 4 see
    # 61; pass 5 computes R1's position 8, a 3rd block: 60. The run took its blocks and freed R0's
    # when it started; its log still counts them pass by pass, as the reference's does.
    assert [p["free_blocks"] for p in log.values()] == [61, 59, 59, 61, 61, 60]
    _, reference, _ = _logged(config, True)
    assert reference == log
    assert fast.summary["passes"] == 6


def test_a_pass_log_changes_no_result(tmp_path):
    """The same run with and without a pass log: the same engine, records and summary."""
    config = _config(tmp_path, ROWS, "vllm", VLLM, timing=POLY)
    quiet = servesim.simulate(copy.deepcopy(config))
    logged = servesim.simulate(copy.deepcopy(config), pass_log=io.StringIO(), detailed=True)
    assert logged.requests == quiet.requests
    drop = ("wall_time_ms",)
    assert ({k: v for k, v in logged.summary.items() if k not in drop}
            == {k: v for k, v in quiet.summary.items() if k not in drop})
    assert logged.summary["simulated"]["engine"] == "fast"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenarios(), st.sampled_from(["vllm", "sglang", "trtllm"]), st.sampled_from([None, POLY]), st.data())
def test_fast_pass_logs_match_on_random_workloads(tmp_path, monkeypatch, scenario, backend, timing, data):
    """Tiny KV caches (preemption, dissolving the group), chunked prefill, prefix sharing, both
    clients: the fast engine's pass log and token times against the reference's."""
    rows, sched, client, trace_block_size = scenario
    trace = write_trace(tmp_path / "t.jsonl", rows)
    config = {
        "engine": {"backend": backend, "timing": timing or {"kind": "fixed", "pass_ms": 10.0},
                   "workers": {"aggregated": {"scheduler": as_backend(sched, backend, data)}}},
        "workload": {"trace": str(trace), "format": "mooncake", "client": client,
                     "trace_block_size": trace_block_size, "warmup_requests": len(rows) // 3},
    }
    try:
        servesim.simulate(dict(copy.deepcopy(config), engine=dict(config["engine"], reference=True)))
    except servesim.ServesimError:
        return   # a deadlock the reference refuses too (tests/support/equivalence.py)
    with monkeypatch.context() as patch:   # hypothesis reuses the fixture across examples
        assert_same_pass_logs(config, patch)
