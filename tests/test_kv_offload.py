"""Host KV offload: GPU-evicted prefix blocks are kept in host memory and loaded back."""

from __future__ import annotations

import pytest

import servesim
from servesim.errors import ServesimError

from tests.support.offload import BLOCK_NS, ROWS, VLLM, offload
from tests.support.runs import run_backend


def test_a_host_hit_is_loaded_instead_of_recomputed(tmp_path):
    # 10 usable blocks. A (blocks 1-4) finishes at 10 ms and its 4 blocks stay cached. B needs 9
    # blocks at 20 ms: 6 never-used ones, then 3 of A's, evicted tail first (keys 4, 3, 2), which
    # go to the host. C at 40 ms: key 1 still on the GPU (4 tokens), keys 2-4 in host memory
    # (12 tokens, 3 blocks copied in 3 × 524,288 ns), and 4 tokens to compute. Its pass takes
    # 10 ms + 1.572864 ms. Without offload it computes 16 tokens in a plain 10 ms pass.
    plain = run_backend(tmp_path, ROWS, "vllm", VLLM, trace_block_size=4)
    tiered = run_backend(tmp_path, ROWS, "vllm", VLLM, trace_block_size=4, role=offload(0.01))
    assert plain.schedule()[2] == {2: 16} and plain.ms(2, "first_token") == 50.0
    assert tiered.schedule()[2] == {2: 4}
    assert tiered.ms(2, "first_token") == 50.0 + 3 * BLOCK_NS / 1e6
    record = tiered.by_id[2]
    assert (record.cached_tokens, record.host_cached_tokens) == (4, 12)
    summary = tiered.result.summary
    assert summary["host_cache_hit_rate"] == pytest.approx(12 / (16 + 36 + 20))
    assert summary["prefix_cache_hit_rate"] == pytest.approx(4 / (16 + 36 + 20))


def test_host_capacity_is_least_recently_used(tmp_path):
    # Room for one block (0.0006 GB // 524,288 bytes = 1): A's evicted keys arrive 4, 3, 2 and
    # only the last, key 2, stays. C loads 1 block and computes 12 tokens.
    tiered = run_backend(tmp_path, ROWS, "vllm", VLLM, trace_block_size=4, role=offload(0.0006))
    assert tiered.schedule()[2] == {2: 12}
    assert tiered.by_id[2].host_cached_tokens == 4
    assert tiered.ms(2, "first_token") == 50.0 + BLOCK_NS / 1e6


def test_bandwidth_sets_the_load_time(tmp_path):
    fast_link = run_backend(tmp_path, ROWS, "vllm", VLLM, trace_block_size=4, role=offload(0.01, 64.0))
    assert fast_link.ms(2, "first_token") == 50.0 + round(3 * BLOCK_NS / 64) / 1e6


def test_sglang_hierarchical_cache(tmp_path):
    sglang = {"page_size": 4, "max_total_tokens": 40, "context_length": 40, "disable_overlap_schedule": True,
              "chunked_prefill_size": 64}
    plain = run_backend(tmp_path, ROWS, "sglang", sglang, trace_block_size=4)
    tiered = run_backend(tmp_path, ROWS, "sglang", sglang, trace_block_size=4, role=offload(0.01))
    assert plain.by_id[2].host_cached_tokens == 0
    loaded = tiered.by_id[2].host_cached_tokens
    assert loaded > 0
    assert tiered.ms(2, "first_token") == plain.ms(2, "first_token") + loaded // 4 * BLOCK_NS / 1e6


def test_offload_needs_a_prefix_cache_and_a_supported_backend():
    with pytest.raises(ServesimError, match="kv_offload needs the prefix cache"):
        servesim.simulate(overrides=[("engine.workers.aggregated.kv_offload", {"host_gb": 10, "bandwidth_gb_s": 50}),
                                     ("engine.workers.aggregated.scheduler.enable_prefix_caching", False)])
    with pytest.raises(ServesimError, match="modelled for vllm and sglang, not trtllm"):
        servesim.simulate({"engine": {"backend": "trtllm", "workers": {"aggregated": offload(10)}},
                           "workload": {"synthetic": {"num_requests": 1, "input_length": 8, "output_length": 8}}})
