"""KV cache bookkeeping shared by every backend (the fast cache and the reference)."""

from __future__ import annotations

import pytest

from servesim.engine.kv_cache import KvCache
from servesim.engine.reference_kv_cache import ReferenceKvCache
from servesim.engine.request import Request
from servesim.workload.prompt import BlockKeys, PrefixInterner


def _holding(kv, request_id, computed):
    """A request whose first `computed` prompt tokens have their blocks."""
    keys = BlockKeys(request_id, 32, None, kv.block_size, 512, PrefixInterner())   # a prompt no one shares
    request = Request(request_id, 0, 0, 32, 16, 16, keys)
    assert kv.allocate(request, computed)
    request.num_computed = computed
    return request


@pytest.mark.parametrize("cache", [KvCache, ReferenceKvCache])
def test_allocate_each_is_all_or_nothing(cache):
    kv = cache(num_gpu_blocks=11, block_size=4, enable_caching=False, max_model_len=64)
    first, second = _holding(kv, 0, 5), _holding(kv, 1, 8)
    assert kv.num_free == 10 - 2 - 2
    # first: ceil((5 + 1) / 4) = 2 blocks, holds 2 -> 0; second: ceil((8 + 1) / 4) = 3, holds 2 -> 1.
    assert kv.allocate_each([first, second], [1, 1])
    assert (len(first.blocks), len(second.blocks), kv.num_free) == (2, 3, 5)
    # first: ceil((5 + 16) / 4) = 6 -> 4 more; second: ceil((8 + 8) / 4) = 4 -> 1 more; 5 in all fit.
    assert kv.allocate_each([first, second], [16, 8])
    assert (len(first.blocks), len(second.blocks), kv.num_free) == (6, 4, 0)
    assert len(set(first.blocks) | set(second.blocks)) == 10


@pytest.mark.parametrize("cache", [KvCache, ReferenceKvCache])
def test_allocate_each_changes_nothing_when_one_does_not_fit(cache):
    kv = cache(num_gpu_blocks=11, block_size=4, enable_caching=False, max_model_len=64)
    first, second = _holding(kv, 0, 5), _holding(kv, 1, 8)
    # first: ceil((5 + 12) / 4) = 5 -> 3 more (one `allocate` alone would get them);
    # second: ceil((8 + 13) / 4) = 6 -> 4 more; 3 + 4 = 7 > 6 free.
    assert not kv.allocate_each([first, second], [12, 13])
    assert (len(first.blocks), len(second.blocks), kv.num_free) == (2, 2, 6)
    assert kv.allocate_each([first, second], [12, 12])       # 3 + 3 = 6: exactly the free blocks
    assert kv.num_free == 0


@pytest.mark.parametrize("cache", [KvCache, ReferenceKvCache])
def test_allocate_each_clips_at_the_context_limit(cache):
    kv = cache(num_gpu_blocks=11, block_size=4, enable_caching=False, max_model_len=10)
    request = _holding(kv, 0, 8)
    # Slots stop at max_model_len 10: ceil(10 / 4) = 3 blocks, holds 2 -> 1, not ceil(16 / 4) - 2 = 2.
    assert kv.allocate_each([request], [8])
    assert len(request.blocks) == 3


@pytest.mark.parametrize("cache", [KvCache, ReferenceKvCache])
def test_allocate_each_marks_filled_blocks_like_allocate(cache):
    one_by_one = cache(num_gpu_blocks=11, block_size=4, enable_caching=True, max_model_len=64)
    together = cache(num_gpu_blocks=11, block_size=4, enable_caching=True, max_model_len=64)
    pairs = []
    for kv in (one_by_one, together):
        requests = [_holding(kv, 0, 5), _holding(kv, 1, 7)]
        for request in requests:
            request.num_output = 3   # 32 + 3 known tokens: the decodes below fill blocks 1 and 2
        pairs.append(requests)
    for request, count in zip(pairs[0], [3, 1]):
        assert one_by_one.allocate(request, count)
    assert together.allocate_each(pairs[1], [3, 1])
    # 5 + 3 = 8 tokens: 2 full blocks; 7 + 1 = 8: 2 full blocks.
    assert [r.num_cached_blocks for r in pairs[0]] == [r.num_cached_blocks for r in pairs[1]] == [2, 2]
    assert one_by_one.num_free == together.num_free == 10 - 4
