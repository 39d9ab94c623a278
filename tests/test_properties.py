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


def as_backend(sched: dict, backend: str, data) -> dict:
    """A vLLM scenario's limits expressed in another backend's settings."""
    if backend == "vllm":
        return sched
    pool = (sched["num_gpu_blocks"] - 1) * sched["block_size"]
    if backend == "sglang":
        page = data.draw(st.sampled_from([1, sched["block_size"]]))
        chunk = max(sched["max_num_batched_tokens"] // page * page, page)
        return {
            "page_size": page,
            "context_length": sched["max_model_len"],
            "max_total_tokens": pool,
            "max_running_requests": sched["max_num_seqs"],
            "chunked_prefill_size": chunk if sched["enable_chunked_prefill"] else -1,
            "max_prefill_tokens": sched["max_num_batched_tokens"],
            "disable_radix_cache": not sched["enable_prefix_caching"],
            "disable_overlap_schedule": not sched["async_scheduling"],
            "schedule_policy": data.draw(st.sampled_from(["fcfs", "lpm"])),
            "enable_mixed_chunk": data.draw(st.booleans()),
            "new_token_ratio_decay": data.draw(st.sampled_from([0.0010033, 0.05])),
            # SGLang's 512-token decode reserve per request would shut these tiny pools to transfers.
            "num_reserved_decode_tokens": 0,
            "scheduler_recv_interval": data.draw(st.sampled_from([1, 1, 3, 30])),
        }
    return {
        "tokens_per_block": sched["block_size"],
        "max_seq_len": sched["max_model_len"],
        "max_tokens": pool,
        "max_batch_size": sched["max_num_seqs"],
        "max_num_tokens": max(sched["max_num_batched_tokens"], sched["block_size"]),
        "enable_chunked_context": sched["enable_chunked_prefill"],
        "enable_block_reuse": sched["enable_prefix_caching"],
        "disable_overlap_scheduler": not sched["async_scheduling"],
        "capacity_scheduler_policy": data.draw(st.sampled_from(["GUARANTEED_NO_EVICT", "MAX_UTILIZATION"])),
    }


SPECULATIVE = st.one_of(st.none(), st.builds(
    lambda method, k, rate: {"method": method, "num_speculative_tokens": k, "acceptance_rate": rate},
    st.sampled_from(["ngram", "eagle", "mtp"]), st.integers(1, 4), st.sampled_from([0.0, 0.5, 0.9, 1.0])))


def _simulate(tmp_path, rows, sched, client, trace_block_size, backend="vllm", speculative=None):
    trace = write_trace(tmp_path / "t.jsonl", rows)
    config = {
        "engine": {"backend": backend,
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
        result, log = _simulate(tmp_path, rows, backend_sched, client, trace_block_size, backend, speculative)
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
