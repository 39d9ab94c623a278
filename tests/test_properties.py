"""Invariants over random workloads and settings (hypothesis)."""

from __future__ import annotations

import io
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import servesim
from servesim.engine import worker as worker_module

from tests.support.runs import write_trace
from tests.support.scenarios import SPECULATIVE, as_backend, scenarios


def _simulate(tmp_path, rows, sched, client, trace_block_size, backend="vllm", speculative=None,
              reference=False):
    trace = write_trace(tmp_path / "t.jsonl", rows)
    config = {
        "engine": {"backend": backend, "reference": reference,
                   "timing": {"kind": "polynomial", "base_ms": 1.5, "per_prefill_token_ms": 0.01,
                              "per_decode_token_ms": 0.02, "per_context_token_ms": 0.001},
                   "workers": {"aggregated": {"scheduler": sched,
                                              **({"speculative": speculative} if speculative else {})}}},
        "workload": {"trace": str(trace), "format": "mooncake", "client": client,
                     "trace_block_size": trace_block_size},
    }
    log = io.StringIO()
    result = servesim.simulate(config, pass_log=log)
    return result, log.getvalue()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenarios(), st.sampled_from(["vllm", "sglang", "trtllm"]), SPECULATIVE, st.data())
def test_invariants(tmp_path, monkeypatch, scenario, backend, speculative, data):
    rows, sched, client, trace_block_size = scenario
    if speculative is not None and speculative["method"] == "ngram" and backend == "vllm":
        sched = dict(sched, async_scheduling=False)
    usable = sched["num_gpu_blocks"] - 1
    if backend != "vllm":
        backend_sched = as_backend(sched, backend, data)
        # SGLang pages may be smaller than the scenario's blocks: count in its pages.
        page = backend_sched.get("page_size", sched["block_size"])
        usable = usable * sched["block_size"] // page
    else:
        backend_sched = sched
    checked = {"passes": 0}
    original = worker_module.Worker.on_pass_end

    def checked_pass_end(self, now, done):
        original(self, now, done)
        kv = self.scheduler.kv
        holders = list(self.scheduler.running)
        if getattr(self.scheduler, "chunked", None) is not None:
            holders.append(self.scheduler.chunked)   # SGLang's request mid-way through its prompt
        held = {b for r in holders for b in r.blocks}
        # Every usable block is either free or referenced by a running request; none twice.
        assert kv.num_free + len(held) == usable
        assert sum(len(r.blocks) for r in holders) >= len(held)
        assert all(kv.ref_cnt[b] >= 1 for b in held)
        assert all(not r.blocks for r in self.scheduler.waiting)
        checked["passes"] += 1

    with monkeypatch.context() as patch:  # hypothesis reuses the fixture across examples
        patch.setattr(worker_module.Worker, "on_pass_end", checked_pass_end)
        # The block invariants read per-request blocks, which only the reference engine holds
        # for every request (the fast engine's decode group keeps its members' in one pool).
        result, log = _simulate(tmp_path, rows, backend_sched, client, trace_block_size, backend, speculative,
                                reference=True)
    records = result.requests

    # Every request completes or is rejected exactly once.
    assert [r.request_id for r in records] == list(range(len(rows)))
    mml = sched["max_model_len"]
    # SGLang keeps one position of the context free (max_new_tokens <= context - input - 1).
    room = [mml - row["input_length"] - (backend == "sglang") for row in rows]
    for i, (rec, row) in enumerate(zip(records, rows)):
        if room[i] < 1:
            assert rec.status == "rejected" and rec.output_length == 0
            continue
        # Output tokens conserved: exactly what was asked, clamped by the context limit.
        assert rec.output_length == min(row["output_length"], room[i])
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
        if backend != "sglang":   # SGLang's decode passes have no token budget
            assert sum(p["scheduled"].values()) <= backend_sched.get("max_num_tokens",
                                                                    sched["max_num_batched_tokens"])
        assert len(p["scheduled"]) <= sched["max_num_seqs"]
        end = p["end_ms"]
    produced = sum(rec.output_length for rec in records)
    assert produced == sum(min(r["output_length"], room[i]) for i, r in enumerate(rows) if room[i] >= 1)


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
