"""Runs of identical decode passes on the per-request schedulers (engine/decode_runs.py).

The random workloads of tests/test_fast_engine.py hold SGLang and TensorRT-LLM with runs
to the reference (the same schedulers without them); these pin what a run is on small
hand-checked cases and cover the states that must stop one.
"""

from __future__ import annotations

import pytest

import servesim
from servesim.engine.decode_runs import DecodeRuns
from servesim.engine.sglang import fast as sglang_fast
from servesim.metrics.collector import Collector

from tests.support.runs import write_trace
from tests.support.equivalence import assert_same

FIXED = {"kind": "fixed", "pass_ms": 10.0}
POLYNOMIAL = {"kind": "polynomial", "base_ms": 1.5, "per_prefill_token_ms": 0.01, "per_decode_token_ms": 0.02,
              "per_context_token_ms": 0.001}


def _sglang(overlap: bool, **extra) -> dict:
    return {"page_size": 1, "context_length": 256, "max_total_tokens": 4096, "max_running_requests": 16,
            "chunked_prefill_size": 256, "max_prefill_tokens": 256, "disable_radix_cache": True,
            "disable_overlap_schedule": not overlap, **extra}


def _trtllm(overlap: bool, **extra) -> dict:
    return {"tokens_per_block": 4, "max_seq_len": 256, "max_tokens": 4096, "max_batch_size": 16,
            "max_num_tokens": 256, "enable_chunked_context": True, "enable_block_reuse": False,
            "disable_overlap_scheduler": not overlap, **extra}


def _config(trace, backend: str, sched: dict, client: dict, timing: dict) -> dict:
    return {"engine": {"backend": backend, "timing": timing, "workers": {"aggregated": {"scheduler": sched}}},
            "workload": {"trace": str(trace), "format": "mooncake", "client": client}}


@pytest.fixture
def spans(monkeypatch):
    """(start ms, end ms) of every pass record, and the number of runs fast-forwarded."""
    recorded = {"spans": [], "runs": 0}
    on_pass = Collector.on_pass
    extend = DecodeRuns.extend

    def recording_on_pass(self, worker, done):
        recorded["spans"].append((done.start_ns // 1_000_000, done.end_ns // 1_000_000))
        on_pass(self, worker, done)

    def counting_extend(self, *args, **kwargs):
        recorded["runs"] += 1
        extend(self, *args, **kwargs)

    def counting_with_behind(*args):   # SGLang's runs with the pass behind them (engine/sglang/behind.py)
        recorded["runs"] += 1
        with_behind(*args)

    with_behind = sglang_fast.extend_with_behind
    monkeypatch.setattr(Collector, "on_pass", recording_on_pass)
    monkeypatch.setattr(DecodeRuns, "extend", counting_extend)
    monkeypatch.setattr(sglang_fast, "extend_with_behind", counting_with_behind)
    return recorded


def test_sglang_run_by_hand(tmp_path, spans):
    rows = [{"timestamp": 0.0, "input_length": 4, "output_length": 4},
            {"timestamp": 0.0, "input_length": 4, "output_length": 6}]
    config = _config(write_trace(tmp_path / "t.jsonl", rows), "sglang", _sglang(overlap=False),
                     {"mode": "open_loop"}, FIXED)
    fast = servesim.simulate(config)
    # Fixed 10 ms passes, no overlap. [0,10): one prefill pass admits both prompts, first
    # tokens at 10. At 10 both decode and both got their previous token at 10: the pass is
    # the same until R0's 4th token, 3 passes, [10,40) (tokens at 20, 30, 40); R0 finishes at
    # 40. R1 then decodes alone from 40 with 2 tokens left: a run [40,60); it finishes at 60.
    assert spans["spans"] == [(0, 10), (10, 40), (40, 60)]
    assert spans["runs"] == 2
    assert fast.summary["passes"] == 6
    assert [ns // 1_000_000 for ns in fast.requests.column("finish_ns")] == [40, 60]
    assert fast.summary["mean_itl_ms"] == 10.0
    spans["spans"].clear()
    assert_same(config)   # the reference: 6 pass records of 10 ms
    assert spans["spans"][:6] == [(i * 10, i * 10 + 10) for i in range(6)]


def test_a_run_after_a_prefill_pass_counts_the_longer_first_gap(tmp_path, spans):
    """SGLang's prefill pass does not decode the running requests: in the run that follows,
    their first gap spans two passes, the others one."""
    rows = [{"timestamp": 0.0, "input_length": 4, "output_length": 8},
            {"timestamp": 15.0, "input_length": 4, "output_length": 3}]
    config = _config(write_trace(tmp_path / "t.jsonl", rows), "sglang", _sglang(overlap=False),
                     {"mode": "open_loop"}, FIXED)
    fast = servesim.simulate(config)
    # [0,10) R0's prefill, its 1st token at 10. R1 arrives at 15, and a run stops before the
    # pass end that reads it: [10,20) is one pass (R0's 2nd token). [20,30) prefills R1 (R0
    # waits). From 30 both decode until R1's 3rd and last token: a run [30,50), R0's 3rd and
    # 4th tokens at 40 and 50. From 50 R0 decodes alone, its 5th to 8th: a run [50,90).
    assert spans["spans"] == [(0, 10), (10, 20), (20, 30), (30, 50), (50, 90)]
    assert spans["runs"] == 2
    # Gaps: R0's 7 are 10, 20 (20 -> 40), then 10 x 5; R1's 2 are 10, 10: (8·10 + 20) / 9 ms.
    assert fast.summary["mean_itl_ms"] == pytest.approx(100 / 9)
    assert fast.summary["p99_itl_ms"] > 19.0
    assert_same(config)


def test_trtllm_head_refused_by_the_guarantee_is_asked_again(tmp_path):
    """Found by an explore draw: with overlap the pass that starts a run was committed before
    the previous pass's finishes were processed. Ten 1-token requests leave at 10 ms; the
    four requests that GUARANTEED_NO_EVICT refused at 0 fit now, and the engine admits them
    in the pass committed at 10 (first tokens at 30), so no run may start at 10."""
    rows = ([{"timestamp": 0.0, "input_length": 1, "output_length": 20}]
            + [{"timestamp": 0.0, "input_length": 1, "output_length": 1}] * 14)
    sched = {"tokens_per_block": 4, "max_seq_len": 64, "max_tokens": 64, "max_batch_size": 12,
             "max_num_tokens": 64, "enable_chunked_context": False, "enable_block_reuse": False,
             "disable_overlap_scheduler": False, "capacity_scheduler_policy": "GUARANTEED_NO_EVICT"}
    config = _config(write_trace(tmp_path / "t.jsonl", rows), "trtllm", sched, {"mode": "open_loop"}, FIXED)
    fast = assert_same(config)
    first = sorted(ns // 1_000_000 for ns in fast.requests.column("first_token_ns"))
    # 16 blocks of 4: R0 reserves ceil(21/4) = 6, each 1-token request 1 (prompt + output),
    # so 10 of them join R0 at 0 and 4 wait.
    assert first == [10] * 11 + [30] * 4


@pytest.mark.parametrize("backend", ["sglang", "trtllm"])
@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("timing", [FIXED, POLYNOMIAL], ids=["fixed", "polynomial"])
def test_steady_closed_loop_runs_match_the_reference(tmp_path, spans, backend, overlap, timing):
    rows = [{"timestamp": 0.0, "input_length": 8 + 5 * (i % 7), "output_length": 20 + 13 * (i % 5)}
            for i in range(60)]
    sched = _sglang(overlap) if backend == "sglang" else _trtllm(overlap)
    config = _config(write_trace(tmp_path / "t.jsonl", rows), backend, sched,
                     {"mode": "closed_loop", "concurrency": 8}, timing)
    fast = assert_same(config)   # the reference's records (one a pass) come first
    assert spans["runs"] > 20
    # Each run of k passes is one record: the fast engine's records are fewer than its passes.
    fast_records = len(spans["spans"]) - fast.summary["passes"]
    assert fast_records < fast.summary["passes"]


@pytest.mark.parametrize("backend", ["sglang", "trtllm"])
@pytest.mark.parametrize("overlap", [False, True])
def test_runs_stop_where_free_blocks_run_out(tmp_path, monkeypatch, spans, backend, overlap):
    """A pool too small for the batch to finish: runs end where the blocks do, and the
    retraction (SGLang) or pause (TensorRT-LLM, MAX_UTILIZATION) happens as in the reference."""
    block_limited = []
    steps_fitting = DecodeRuns._steps_fitting

    def recording_steps_fitting(self, *args):
        steps = steps_fitting(self, *args)
        block_limited.append(steps)
        return steps

    pages_fitting = DecodeRuns._pages_fitting

    def recording_pages_fitting(self, *args):   # the same cut in closed form (one-token pages)
        steps = pages_fitting(self, *args)
        block_limited.append(steps)
        return steps

    monkeypatch.setattr(DecodeRuns, "_steps_fitting", recording_steps_fitting)
    monkeypatch.setattr(DecodeRuns, "_pages_fitting", recording_pages_fitting)
    rows = [{"timestamp": 0.0, "input_length": 6, "output_length": 40} for _ in range(6)]
    if backend == "sglang":
        sched = _sglang(overlap, context_length=64, max_total_tokens=150, num_reserved_decode_tokens=0,
                        init_new_token_ratio=0.05, min_new_token_ratio=0.05, chunked_prefill_size=8,
                        max_prefill_tokens=8)   # one prompt a prefill pass: the batch is never marked full
    else:
        sched = _trtllm(overlap, max_seq_len=64, max_tokens=148, capacity_scheduler_policy="MAX_UTILIZATION")
    config = _config(write_trace(tmp_path / "t.jsonl", rows), backend, sched, {"mode": "open_loop"}, FIXED)
    fast = assert_same(config)
    assert spans["runs"] >= 1
    assert max(block_limited, default=0) >= 2   # some run was cut short by the free blocks, not by a finish
    assert sum(fast.requests.column("preemptions")) > 0


@pytest.mark.parametrize("backend", ["sglang", "trtllm"])
def test_runs_on_a_full_decode_worker_with_received_kv_waiting(tmp_path, monkeypatch, backend):
    """A P/D decode worker whose request slots are all running keeps received requests waiting;
    they cannot join until a running request leaves, so the running ones still make runs."""
    runs_with_waiting = []
    quiet_steps = DecodeRuns.quiet_steps

    def recording_quiet_steps(self, decided, limit, now):
        steps = quiet_steps(self, decided, limit, now)
        if self.transferred and steps >= 2:
            runs_with_waiting.append(steps)
        return steps

    monkeypatch.setattr(DecodeRuns, "quiet_steps", recording_quiet_steps)
    rows = [{"timestamp": 0.0, "input_length": 8, "output_length": 30} for _ in range(6)]
    sched = (_sglang(False, max_running_requests=2) if backend == "sglang"
             else _trtllm(False, max_batch_size=2))
    config = _config(write_trace(tmp_path / "t.jsonl", rows), backend, sched, {"mode": "open_loop"}, FIXED)
    config["engine"]["workers"] = {"prefill": {"count": 1, "scheduler": dict(sched)},
                                   "decode": {"count": 1, "scheduler": dict(sched)}}
    config["engine"]["kv_transfer"] = {"bandwidth_gb_s": 50.0, "latency_ms": 0.5, "first_token_from": "prefill"}
    assert_same(config)
    assert runs_with_waiting


def _medium_case(rng, tmp_path, case: int) -> dict:
    """A few hundred requests on realistic limits, where runs are long and pools fill."""
    backend = rng.choice(["sglang", "trtllm"])
    overlap = rng.random() < 0.6
    rows, t = [], 0.0
    for _ in range(rng.randint(80, 300)):
        t += rng.choice([0.0, 0.0, 0.05, 0.3, 1.0])
        row = {"timestamp": round(t, 3), "input_length": rng.randint(16, 900), "output_length": rng.randint(1, 300)}
        if rng.random() < 0.5:
            row["hash_ids"] = [rng.randint(0, 6) for _ in range(rng.randint(1, 3))]
        rows.append(row)
    pool = rng.choice([3000, 8000, 30000, 200000])
    if backend == "sglang":
        page = rng.choice([1, 1, 16])
        sched = {"page_size": page, "context_length": 1536, "max_total_tokens": pool,
                 "max_running_requests": rng.choice([8, 32, 128]),
                 "chunked_prefill_size": rng.choice([512, 2048, -1]), "max_prefill_tokens": rng.choice([2048, 16384]),
                 "disable_radix_cache": rng.random() < 0.3, "disable_overlap_schedule": not overlap,
                 "schedule_policy": rng.choice(["fcfs", "lpm"]), "enable_mixed_chunk": rng.random() < 0.3}
    else:
        sched = {"tokens_per_block": rng.choice([16, 32]), "max_seq_len": 1536, "max_tokens": pool,
                 "max_batch_size": rng.choice([8, 32, 128]), "max_num_tokens": rng.choice([2048, 8192]),
                 "enable_chunked_context": rng.random() < 0.7, "enable_block_reuse": rng.random() < 0.7,
                 "disable_overlap_scheduler": not overlap,
                 "capacity_scheduler_policy": rng.choice(["GUARANTEED_NO_EVICT", "MAX_UTILIZATION"])}
    timing = rng.choice([FIXED, POLYNOMIAL, {"kind": "roofline"}])
    client = rng.choice([{"mode": "open_loop"}, {"mode": "closed_loop", "concurrency": rng.choice([4, 16, 64])}])
    config = _config(write_trace(tmp_path / f"t{case}.jsonl", rows), backend, sched, client, timing)
    config["workload"]["trace_block_size"] = 64
    if rng.random() < 0.3:
        config["engine"]["workers"] = {"prefill": {"count": rng.choice([1, 2]), "scheduler": dict(sched)},
                                       "decode": {"count": rng.choice([1, 2]), "scheduler": dict(sched)}}
        config["engine"]["kv_transfer"] = {"bandwidth_gb_s": 50.0, "latency_ms": 0.5,
                                           "first_token_from": rng.choice(["prefill", "decode"])}
    return config


@pytest.mark.slow
def test_runs_match_the_reference_at_medium_scale(tmp_path):
    """The random workloads of test_fast_engine are tiny; here 24 seeded cases of 80-300 requests
    on pools of 3,000-200,000 tokens (both backends, overlap, P/D, all three timings)."""
    import random

    rng = random.Random(20261201)
    for case in range(24):
        assert_same(_medium_case(rng, tmp_path, case))
