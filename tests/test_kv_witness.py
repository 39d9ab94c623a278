"""The KV cache's record of what a run read of its size (engine/kv/cache.py `refused`), which
sweep sharing relies on (docs/modeling/shared_runs.md): every capacity check that fails sets it,
and checks that pass leave it clear. The sweep-level tests (tests/test_shared_runs.py) reach
only some of these checks; each is pinned here on a hand-counted pool."""

from __future__ import annotations

from servesim.engine.kv.cache import KvCache
from servesim.engine.request import Request


def pool() -> KvCache:
    """11 blocks of 4 tokens, no prefix caching: 10 free (block 0 is the null block)."""
    kv = KvCache(num_gpu_blocks=11, block_size=4, enable_caching=False, max_model_len=64)
    assert kv.num_free == 10 and not kv.refused
    return kv


def request(request_id: int, prompt: int) -> Request:
    return Request(request_id, 0, 0, prompt, 8, 8, None)


def test_checks_that_pass_leave_the_record_clear():
    kv = pool()
    a = request(0, 16)                       # 4 blocks
    assert kv.admit(a, [], 16, has_running=False)
    a.num_computed = 16
    assert kv.allocate(a, 4)                 # 20 tokens: a fifth block
    b = request(1, 8)                        # 2 blocks
    assert kv.allocate_each([b], [8])
    assert kv.num_free == 3 and not kv.refused and not kv.hit


def test_admission_refused_for_the_whole_sequence():
    kv = pool()
    assert not kv.admit(request(0, 44), [], 44, has_running=False)   # 11 blocks > 10 free
    assert kv.refused


def test_admission_refused_for_its_lookahead():
    """36 tokens fit in 9 of the 10 free blocks; with 8 lookahead slots they need 11."""
    kv = pool()
    assert not kv.admit(request(0, 36), [], 36, has_running=False, lookahead=8)
    assert kv.refused


def test_allocation_refused():
    """After a 36-token admission (9 blocks, 1 free), 8 more tokens need 2 blocks."""
    kv = pool()
    a = request(0, 36)
    assert kv.admit(a, [], 36, has_running=False) and not kv.refused
    a.num_computed = 36
    assert not kv.allocate(a, 8)
    assert kv.refused


def test_batch_allocation_refused():
    """Two requests of 24 tokens need 6 + 6 blocks of the 10 free: neither is allocated."""
    kv = pool()
    a, b = request(0, 24), request(1, 24)
    assert not kv.allocate_each([a, b], [24, 24])
    assert kv.refused and kv.num_free == 10 and not a.blocks and not b.blocks
