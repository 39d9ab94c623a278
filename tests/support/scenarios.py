"""Random workloads and scheduler settings (hypothesis strategies) for the invariant and fast-engine tests."""

from __future__ import annotations

from hypothesis import strategies as st


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
