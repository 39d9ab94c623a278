"""Invariants over random workloads and settings (hypothesis)."""

from __future__ import annotations

import io
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import servesim
from servesim.engine import worker as worker_module

from .conftest import write_trace


@st.composite
def scenarios(draw):
    block_size = draw(st.sampled_from([4, 8, 16]))
    max_model_len = draw(st.sampled_from([64, 128, 256]))
    chunked = draw(st.booleans())
    max_num_seqs = draw(st.integers(1, 16))
    budget = draw(st.integers(max(max_num_seqs, 8), 300))
    if not chunked:
        budget = max(budget, max_model_len)
    sched = {
        "block_size": block_size,
        "max_model_len": max_model_len,
        "num_gpu_blocks": max_model_len // block_size + 1 + draw(st.integers(0, 40)),
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": budget,
        "enable_chunked_prefill": chunked,
        "enable_prefix_caching": draw(st.booleans()),
        "long_prefill_token_threshold": draw(st.sampled_from([0, 0, 8, 32])),
        "async_scheduling": draw(st.booleans()),
    }
    n = draw(st.integers(1, 25))
    rows = []
    t = 0.0
    for _ in range(n):
        t += draw(st.sampled_from([0.0, 0.25, 3.3, 9.999, 10.0, 47.1]))
        row = {"timestamp": round(t, 3), "input_length": draw(st.integers(1, max_model_len + 20)),
               "output_length": draw(st.integers(1, 60))}
        if draw(st.booleans()):
            row["hash_ids"] = draw(st.lists(st.integers(0, 5), min_size=1, max_size=8))
        rows.append(row)
    client = draw(st.sampled_from([{"mode": "open_loop"}, {"mode": "closed_loop", "concurrency": 3}]))
    trace_block_size = draw(st.sampled_from([block_size, 12, 32]))
    return rows, sched, client, trace_block_size


def _simulate(tmp_path, rows, sched, client, trace_block_size):
    trace = write_trace(tmp_path / "t.jsonl", rows)
    config = {
        "engine": {"timing": {"kind": "polynomial", "base_ms": 1.5, "per_prefill_token_ms": 0.01,
                              "per_decode_token_ms": 0.02, "per_context_token_ms": 0.001},
                   "workers": {"aggregated": {"scheduler": sched}}},
        "workload": {"trace": str(trace), "format": "mooncake", "client": client,
                     "trace_block_size": trace_block_size},
    }
    log = io.StringIO()
    result = servesim.simulate(config, pass_log=log)
    return result, log.getvalue()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenarios())
def test_invariants(tmp_path, monkeypatch, scenario):
    rows, sched, client, trace_block_size = scenario
    usable = sched["num_gpu_blocks"] - 1
    checked = {"passes": 0}
    original = worker_module.Worker.on_pass_end

    def checked_pass_end(self, now, done):
        original(self, now, done)
        kv = self.scheduler.kv
        held = {b for r in self.scheduler.running for b in r.blocks}
        # Every usable block is either free or referenced by a running request; none twice.
        assert kv.num_free + len(held) == usable
        assert sum(len(r.blocks) for r in self.scheduler.running) >= len(held)
        assert all(kv.ref_cnt[b] >= 1 for b in held)
        assert all(not r.blocks for r in self.scheduler.waiting)
        checked["passes"] += 1

    with monkeypatch.context() as patch:  # hypothesis reuses the fixture across examples
        patch.setattr(worker_module.Worker, "on_pass_end", checked_pass_end)
        result, log = _simulate(tmp_path, rows, sched, client, trace_block_size)
    records = result.requests

    # Every request completes or is rejected exactly once.
    assert [r.request_id for r in records] == list(range(len(rows)))
    mml = sched["max_model_len"]
    for rec, row in zip(records, rows):
        if row["input_length"] >= mml:
            assert rec.status == "rejected" and rec.output_length == 0
            continue
        # Output tokens conserved: exactly what was asked, clamped by max_model_len.
        assert rec.output_length == min(row["output_length"], mml - row["input_length"])
        # Time flows forward for each request.
        assert rec.arrival_ns <= rec.first_scheduled_ns < rec.first_token_ns <= rec.finish_ns
        assert rec.cached_tokens <= row["input_length"] - 1

    passes = [json.loads(line) for line in log.splitlines()]
    assert len(passes) == checked["passes"]
    end = -1.0
    for i, p in enumerate(passes):
        assert p["pass"] == i
        assert p["start_ms"] >= end and p["end_ms"] > p["start_ms"]
        assert 0 <= p["free_blocks"] <= usable
        assert sum(p["scheduled"].values()) <= sched["max_num_batched_tokens"]
        assert len(p["scheduled"]) <= sched["max_num_seqs"]
        end = p["end_ms"]
    produced = sum(rec.output_length for rec in records)
    assert produced == sum(min(r["output_length"], mml - r["input_length"])
                           for r in rows if r["input_length"] < mml)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenarios())
def test_deterministic(tmp_path, scenario):
    first, log1 = _simulate(tmp_path, *scenario)
    second, log2 = _simulate(tmp_path, *scenario)
    assert first.requests == second.requests
    assert log1 == log2
    a = {k: v for k, v in first.summary.items() if k != "wall_time_ms"}
    b = {k: v for k, v in second.summary.items() if k != "wall_time_ms"}
    assert a == b
