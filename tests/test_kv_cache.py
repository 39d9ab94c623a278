"""KV cache bookkeeping shared by every backend (the fast cache and the reference)."""

from __future__ import annotations

import pytest

from servesim.engine.kv.cache import KvCache
from servesim.engine.kv.reference_cache import ReferenceKvCache
from servesim.engine.request import Request
from servesim.workload.prompt import _END_BITS, BlockKeys, PrefixInterner


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


# ---------------------------------------------------------------- the fast cache against the reference

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_PROMPTS = st.lists(st.tuples(st.lists(st.integers(0, 1), min_size=1, max_size=3), st.integers(-6, 3)),
                    min_size=2, max_size=7)
_OPS = st.lists(st.tuples(st.sampled_from(["admit", "admit", "decode", "finish", "finish", "preempt", "retract"]),
                          st.integers(0, 6)), max_size=80)


def _prompt_maker(kv, prompts, interner=None):
    """Requests whose prompts are hash_id paths over a tiny alphabet, so prefixes repeat often."""
    interner = interner or PrefixInterner()
    next_id = iter(range(10**6))

    def make(index):
        path, trim = prompts[index]
        # hash_id i of a path stands for 8 tokens (2 blocks of 4); prompts end inside or past them
        hash_ids = tuple(i * 3 + h for i, h in enumerate(path))
        prompt_len = max(1, len(path) * 8 + trim)
        request_id = next(next_id)
        keys = BlockKeys(request_id, prompt_len, hash_ids, kv.block_size, 8, interner)
        return Request(request_id, 0, 0, prompt_len, 8, 8, keys)
    return make


def _drive(kv, prompts, ops, interner=None):
    """Apply `ops` as an engine would; return every observable answer the cache gave.

    An op's index picks among the requests in the state it needs; a finished request is
    replaced by a new one with the same prompt, so freed prefixes are asked for again."""
    make = _prompt_maker(kv, prompts, interner)
    requests = [make(i) for i in range(len(prompts))]
    state = ["waiting"] * len(requests)
    seen = []
    for op, pick in ops:
        wanted = "waiting" if op == "admit" else "running"
        candidates = [i for i, s in enumerate(state) if s == wanted]
        if not candidates:
            continue
        index = candidates[pick % len(candidates)]
        request = requests[index]
        if op == "admit":
            hits = kv.lookup(request)
            evictable = sum(1 for b in hits if kv.is_evictable(b))
            new_tokens = request.num_tokens - len(hits) * kv.block_size
            if pick % 2:   # chunked prefill: a first chunk of 4, 8 or 12 tokens
                new_tokens = min(new_tokens, 4 * (1 + pick % 3))
            admitted = kv.admit(request, hits, new_tokens, has_running="running" in state)
            seen.append(("admit", index, len(hits), evictable, admitted))
            if admitted:
                request.num_computed = len(hits) * kv.block_size + new_tokens
                state[index] = "running"
        elif op == "decode" and request.num_computed < request.num_tokens:   # the next prefill chunk
            step = min(4, request.num_tokens - request.num_computed)
            grown = kv.allocate(request, step)
            seen.append(("prefill", index, grown))
            if grown:
                request.num_computed += step
        elif op == "decode":
            grown = kv.allocate(request, 1)
            seen.append(("decode", index, grown))
            if grown:
                request.num_computed += 1
                request.num_output += 1
        elif op == "finish":
            kv.free(request)
            requests[index] = make(index)
            state[index] = "waiting"
        else:
            keep = request.prompt_len // kv.block_size if op == "retract" else None
            kv.free(request, finished=False, keep_blocks=keep)
            request.num_computed = 0
            state[index] = "waiting"
        # Shareable contents cached (keys > 0): what later hits can find. Private keys differ
        # by design: the fast cache gives them only at a preemption.
        seen.append(("free blocks", kv.num_free, _shared_cached_keys(kv)))
        seen.append(("counts", _held_counts(kv, requests, state)))
    seen.append(("router view", [kv.cached_prefix_blocks(r.keys) for r in requests]))
    return seen


def _held_counts(kv, requests, state) -> list[list[int]]:
    """The reference counts of every running request's keyed shareable blocks. The fast cache
    leaves those a request holds alone implicit (1, stored 0) from its hold's `lo` on."""
    counts = []
    for request, now in zip(requests, state):
        if now != "running":
            continue
        keyed = min(request.num_cached_blocks, request.keys.shared_blocks, len(request.blocks))
        stored = [kv.ref_cnt[b] for b in request.blocks[:keyed]]
        if isinstance(kv, KvCache) and request.kv_hold is not None:
            lo = min(request.kv_hold.lo, keyed)
            assert not any(stored[lo:]), "an implicit count is stored"
            stored[lo:] = [1] * (keyed - lo)
        counts.append(stored)
    return counts


def _free_blocks(kv: KvCache) -> list[int]:
    """The fast cache's free blocks that have been handed out before (not stale copies)."""
    free = list(kv.free_plain)
    for entry in kv.lru:
        serial = getattr(entry, "serial", None)
        free += [b for b in entry if serial is None or kv.left_queue.get(b, -1) < serial]
    return free


def _shared_cached_keys(kv) -> list[int]:
    """Every shareable content key the cache holds, sorted."""
    if not isinstance(kv, KvCache):
        return sorted(key for key in kv.cache if key > 0)
    keys = [(node << _END_BITS) + chunk.first_end + i * kv.block_size
            for node, chunk in kv.chunks.items() for i in range(len(chunk))]
    assert set(kv.extra) <= set(keys), "a second copy of a key the chunks do not hold"
    return sorted(keys)


class _CompactingKvCache(KvCache):
    """Compacts its free queue after every free: the real threshold (thousands of stale
    copies) is never reached by workloads this small."""

    def free(self, *args, **kwargs) -> None:
        super().free(*args, **kwargs)
        self._compact_queue()


class _HeadCheckingKvCache(KvCache):
    """Checks what the chunks rely on after every insertion and eviction: each holds a
    non-empty head of its prefix id's blocks, no block twice, and every second copy of a
    key sits beside a first."""

    def _check(self) -> None:
        held = [b for chunk in self.chunks.values() for b in chunk]
        held += [b for copies in self.extra.values() for b in copies]
        assert all(self.chunks.values()) and len(held) == len(set(held))
        _shared_cached_keys(self)
        # A block that goes free keeps its stored count 0: a later owner's implicit count relies on it.
        assert not any(self.ref_cnt[b] for b in _free_blocks(self))

    def free(self, *args, **kwargs) -> None:
        super().free(*args, **kwargs)
        self._check()

    def cache_full_blocks(self, request, num_tokens: int) -> None:
        super().cache_full_blocks(request, num_tokens)
        self._check()

    def take(self, count: int, into: list[int]) -> None:
        super().take(count, into)
        self._check()


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prompts=_PROMPTS, ops=_OPS, num_gpu_blocks=st.integers(4, 12))
def test_fast_cache_answers_as_the_reference(prompts, ops, num_gpu_blocks):
    """Tiny pools and repeated prefixes: hits on free blocks, evictions of runs holding stale
    copies, preemptions that key private blocks, SGLang-style retractions that cut them."""
    answers = []
    for cache in (_HeadCheckingKvCache, _CompactingKvCache, ReferenceKvCache):
        kv = cache(num_gpu_blocks=num_gpu_blocks, block_size=4, enable_caching=True, max_model_len=64)
        answers.append(_drive(kv, prompts, ops))
    assert answers[0] == answers[2]
    assert answers[1] == answers[2]


@pytest.mark.parametrize("cache", [KvCache, ReferenceKvCache])
def test_eviction_skips_blocks_a_hit_took_back(cache):
    """vLLM's free queue, tail first, with a hit taking blocks out of its middle.

    Block size 4; a hash_id is 8 tokens. 10 blocks, 9 usable (block 0 is the null block).
    """
    kv = cache(num_gpu_blocks=10, block_size=4, enable_caching=True, max_model_len=64)
    interner = PrefixInterner()

    def request(request_id, hash_ids, prompt_len):
        keys = BlockKeys(request_id, prompt_len, hash_ids, 4, 8, interner)
        return Request(request_id, 0, 0, prompt_len, 8, 8, keys)

    def admit(r):
        hits = kv.lookup(r)
        assert kv.admit(r, hits, r.num_tokens - 4 * len(hits), has_running=False)
        r.num_computed = r.num_tokens
        return len(hits)

    d, a, e = request(0, (5,), 8), request(1, (0, 1), 16), request(2, (6,), 8)
    assert [admit(r) for r in (d, a, e)] == [0, 0, 0]          # 2 + 4 + 2 = 8 blocks, 1 left
    kv.free(d)                                                 # queue: d1 d0
    kv.free(a)                                                 # queue: d1 d0 | a3 a2 a1 a0
    b = request(3, (0, 1), 16)
    # A hit stops one block short of the prompt's end: (16 - 1) // 4 = 3 blocks, a0..a2,
    # taken back out of the queue; the last fresh block holds b's fourth (a second copy of
    # a3's content: both are cached).
    assert admit(b) == 3 and kv.num_free == 3                  # d1 d0 a3
    kv.free(e)                                                 # queue: d1 d0 a3 | e1 e0
    assert kv.num_free == 5
    c = request(4, (7, 8), 16)
    assert admit(c) == 0 and kv.num_free == 1                  # took d1 d0 a3 e1, in that order
    # b's four blocks kept their keys (a3 went, b's copy of it stays); d's are gone, and e
    # keeps only e0. Evicting a2, which b holds, instead of e1 would leave b 2 and e 2.
    assert kv.cached_prefix_blocks(b.keys) == 4
    assert kv.cached_prefix_blocks(request(5, (5,), 8).keys) == 0
    assert kv.cached_prefix_blocks(request(6, (6,), 8).keys) == 1
    # The rest of e's run goes next: its key with it.
    assert admit(request(7, (9,), 4)) == 0 and kv.num_free == 0
    assert kv.cached_prefix_blocks(request(8, (6,), 8).keys) == 0


@pytest.mark.parametrize("cache", [KvCache, ReferenceKvCache])
def test_preempted_request_keeps_its_own_blocks_once(cache):
    """A preemption keys the request's own blocks; the readmission hits them; a second
    preemption keys only those still without a key, and eviction removes each key once.

    Block size 4, hash_ids of 8 tokens, 8 blocks (7 usable)."""
    kv = cache(num_gpu_blocks=8, block_size=4, enable_caching=True, max_model_len=64)
    interner = PrefixInterner()
    keys = BlockKeys(0, 8, (0,), 4, 8, interner)
    r = Request(0, 0, 0, 8, 16, 16, keys)
    assert kv.admit(r, kv.lookup(r), 8, has_running=False)   # blocks s0 s1 (shared)
    r.num_computed = 8
    for _ in range(8):                                         # 8 outputs: blocks p2 p3 (its own)
        assert kv.allocate(r, 1)
        r.num_computed += 1
        r.num_output += 1
    kv.free(r, finished=False)                                 # all four keep keys; queue p3 p2 s1 s0
    r.num_computed = 0
    assert kv.num_free == 7
    # 16 tokens known: a hit covers (16 - 1) // 4 = 3 blocks, s0 s1 p2; p3 stays queued and
    # the fourth block is a new one, n3, with p3's content.
    hits = kv.lookup(r)
    assert len(hits) == 3
    assert kv.admit(r, hits, 16 - 12, has_running=False)
    r.num_computed = 16
    kv.free(r, finished=False)     # queue: p3 (its run's others went stale) | s0 s1 p2 n3
    r.num_computed = 0
    assert kv.num_free == 7
    other = Request(1, 0, 0, 8, 4, 4, BlockKeys(1, 8, (5,), 4, 8, interner))
    # 7 free: the 2 never used, p3 (its copy of key 3 goes; n3 still holds it), then the
    # second run from its tail: n3, p2.
    assert kv.admit(other, kv.lookup(other), 8 + 12, has_running=False)   # 20 tokens: 5 blocks
    assert kv.num_free == 2
    # s0 s1 still cached; p2 gone with its only key: the hit stops at the shared prefix.
    assert len(kv.lookup(r)) == 2


@pytest.mark.parametrize("cache", [KvCache, ReferenceKvCache])
def test_free_with_a_shared_block_after_an_unshared_one(cache):
    """Blocks another request holds need not be a head of the freed request's blocks: with a
    content cached twice, a hit takes the first copy, and the request's own copy goes free
    between blocks that stay held. Block size 4, hash_ids of 8 tokens, 15 usable blocks."""
    kv = cache(num_gpu_blocks=16, block_size=4, enable_caching=True, max_model_len=64)
    interner = PrefixInterner()

    def request(request_id, hash_ids, prompt_len):
        return Request(request_id, 0, 0, prompt_len, 8, 8, BlockKeys(request_id, prompt_len, hash_ids, 4, 8, interner))

    r, s, q = request(0, (0, 1), 16), request(1, (0,), 8), request(2, (0, 1), 16)
    assert kv.admit(r, kv.lookup(r), 4, has_running=False)    # a first chunk: r0, keyed
    r.num_computed = 4
    assert len(kv.lookup(s)) == 1                              # (8 - 1) // 4 = 1: r0
    assert kv.admit(s, kv.lookup(s), 4, has_running=True)      # s1 holds key 1 first
    s.num_computed = 8
    assert kv.allocate(r, 12)                                  # r1 (key 1 again), r2, r3
    r.num_computed = 16
    hits = kv.lookup(q)                                        # r0, s1 (key 1's first copy), r2
    assert len(hits) == 3
    assert kv.admit(q, hits, 4, has_running=True)              # and one new block
    q.num_computed = 16
    assert kv.num_free == 15 - 6
    # Holders: r0 by r, s, q; r1 by r alone; r2 by r, q; r3 by r alone. Freeing r frees r1
    # and r3 only: 9 + 2.
    kv.free(r)
    assert kv.num_free == 11
    assert len(kv.lookup(request(3, (0, 1), 16))) == 3


@pytest.mark.parametrize("cache", [KvCache, ReferenceKvCache])
def test_a_key_three_blocks_hold_passes_to_the_earliest_copy_left(cache):
    """vLLM keeps every block that holds a content (`cached_block_hash_to_block`), and a hit
    takes the first cached of them: when that one is evicted, the next cached takes over.

    Block size 4, hash_ids of 8 tokens: a prompt of 8 tokens is two shareable blocks."""
    kv = cache(num_gpu_blocks=12, block_size=4, enable_caching=True, max_model_len=64)
    interner = PrefixInterner()

    def request(request_id, prompt_len=8):
        return Request(request_id, 0, 0, prompt_len, 4, 4, BlockKeys(request_id, prompt_len, (0,), 4, 8, interner))

    # Three requests computing the same prompt, admitted before any of it was cached (no
    # hits): each key is held by three blocks, cached in the order a, b, c.
    a, b, c = request(0), request(1), request(2)
    for r in (a, b, c):
        assert kv.admit(r, [], 8, has_running=False)
        r.num_computed = 8
    first_blocks = [r.blocks[0] for r in (a, b, c)]
    for r in (a, b, c):
        kv.free(r)            # queue: the 5 blocks never used, then a1 a0 | b1 b0 | c1 c0
    assert kv.num_free == 11
    taken: list[int] = []
    kv.take(5 + 2, taken)     # the 5 never used, then a1 and a0
    # A hit on the first block now takes b's copy, the earliest cached of those left.
    assert kv.lookup(request(3, 5)) == [first_blocks[1]]


@pytest.mark.parametrize("cache", [KvCache, ReferenceKvCache])
def test_counts_left_implicit_are_stored_when_another_request_hits_them(cache):
    """The fast cache leaves the counts of shared blocks a request cached itself implicit
    (engine/kv/cache.py's `_Hold`) until a lookup hits them, or another request takes over
    the tail of their prefix id's chunk. Block size 4, trace blocks of 16 tokens: one prefix
    id's chunk holds four blocks."""
    kv = cache(num_gpu_blocks=16, block_size=4, enable_caching=True, max_model_len=64)
    fast = isinstance(kv, KvCache)
    interner = PrefixInterner()

    def request(request_id, prompt_len=16):
        return Request(request_id, 0, 0, prompt_len, 4, 4, BlockKeys(request_id, prompt_len, (0,), 4, 16, interner))

    a, b, c = request(0), request(1), request(2)
    assert kv.admit(a, kv.lookup(a), 4, has_running=False)    # a first chunk: a0, keyed
    a.num_computed = 4
    if fast:
        assert a.kv_hold.lo == 0 and kv.ref_cnt[a.blocks[0]] == 0   # held by a alone: not stored
    hits = kv.lookup(b)
    assert hits == a.blocks[:1] and not kv.is_evictable(hits[0])
    if fast:
        assert a.kv_hold.lo == 1 and kv.ref_cnt[a.blocks[0]] == 1   # the lookup stored it
    assert kv.admit(b, hits, 4, has_running=True)              # b1 keyed: b extends the chunk
    b.num_computed = 8
    assert kv.num_free == 15 - 2
    if fast:
        assert kv.chunks[a.keys.chunk_spans()[0][0]].lazy is b.kv_hold and b.kv_hold.lo == 1
    assert kv.allocate(a, 8)                                   # a1 (b1's content again), a2
    a.num_computed = 12
    if fast:
        # a's copy a1 is counted; a2 makes the chunk's tail a's, so b's b1 is counted first.
        assert a.kv_hold.lo == 2 and kv.ref_cnt[a.blocks[1]] == 1
        assert b.kv_hold.lo == 2 and kv.ref_cnt[b.blocks[1]] == 1
        assert kv.ref_cnt[a.blocks[2]] == 0
    hits = kv.lookup(c)                                        # a0, b1 (the first copy), a2
    assert hits == [a.blocks[0], b.blocks[1], a.blocks[2]]
    assert not any(kv.is_evictable(block) for block in hits)
    assert kv.admit(c, hits, 4, has_running=True)
    c.num_computed = 16
    assert kv.num_free == 15 - 5                               # a0 a1 a2, b1, c's new c3
    kv.free(a)      # a0 is held by b and c, a1 by a alone, a2 by c: a1 goes free
    assert kv.num_free == 15 - 4
    kv.free(b)
    kv.free(c)
    assert kv.num_free == 15
    assert kv.cached_prefix_blocks(request(3).keys) == 4
    if fast:
        assert not any(kv.ref_cnt)


@pytest.mark.parametrize("cache", [KvCache, ReferenceKvCache])
def test_a_freed_run_of_shared_blocks_is_evicted_by_position(cache):
    """A finished request's shared blocks enter the free queue as one run with no key list
    (the fast cache's `_FreedRun.chain`): evicting its tail finds each prefix id's chunk from
    the blocks' positions. Block size 4, trace blocks of 16 tokens, 15 usable blocks."""
    kv = cache(num_gpu_blocks=16, block_size=4, enable_caching=True, max_model_len=64)
    interner = PrefixInterner()

    def request(request_id, prompt_len, hash_ids):
        return Request(request_id, 0, 0, prompt_len, 4, 4, BlockKeys(request_id, prompt_len, hash_ids, 4, 16, interner))

    def admit(r):
        hits = kv.lookup(r)
        assert kv.admit(r, hits, r.num_tokens - 4 * len(hits), has_running=False)
        r.num_computed = r.num_tokens
        return len(hits)

    a = request(0, 32, (0, 1))                      # 8 shared blocks: two chunks of four
    assert admit(a) == 0
    kv.free(a)
    if isinstance(kv, KvCache):
        (run,) = kv.lru
        assert run.keys is None and run.chain is a.keys and run.base == 0
    assert kv.cached_prefix_blocks(a.keys) == 8
    assert admit(request(1, 4 * 9, None)) == 0      # 7 never used, then a's two deepest blocks
    assert kv.cached_prefix_blocks(a.keys) == 6
    assert admit(request(2, 4 * 3, None)) == 0      # the rest of the second chunk, one of the first
    assert kv.cached_prefix_blocks(a.keys) == 3
    assert len(kv.lookup(request(3, 32, (0, 1)))) == 3


def test_a_freed_requests_chunks_skip_its_hold_without_a_call(monkeypatch):
    """A chunk names the hold of the request that last extended it, after that request freed
    its blocks too: the free ends the hold (`lo` past every block), so a lookup or a take-over
    of the chunk finds nothing implicit in it without calling `_materialize` (row 5r made
    70,000 such calls). Block size 4, trace blocks of 16 tokens."""
    kv = KvCache(num_gpu_blocks=16, block_size=4, enable_caching=True, max_model_len=64)
    interner = PrefixInterner()

    def request(request_id, prompt_len=16):
        return Request(request_id, 0, 0, prompt_len, 4, 4, BlockKeys(request_id, prompt_len, (0,), 4, 16, interner))

    calls = []
    materialize = KvCache._materialize
    monkeypatch.setattr(KvCache, "_materialize", lambda self, hold, upto: calls.append(hold) or materialize(self, hold, upto))
    a, b, c = request(0), request(1), request(2)
    assert kv.admit(a, kv.lookup(a), 16, has_running=False)   # a0 .. a3 keyed, held by a alone
    a.num_computed = 16
    (chunk,) = kv.chunks.values()
    hold = a.kv_hold
    assert chunk.lazy is hold and len(chunk) == 4
    hits = kv.lookup(b)                     # a live hold: its blocks are counted first (the patch works)
    assert calls == [hold] and hits == a.blocks[:3] and hold.lo == 3
    kv.free(a)
    assert chunk.lazy is hold and hold.lo > 64   # ended: nothing of it is implicit any more
    assert not any(kv.ref_cnt)
    hits = kv.lookup(c)
    assert hits == chunk[:3] and all(kv.is_evictable(block) for block in hits)
    assert kv.admit(c, hits, 4, has_running=False)
    c.num_computed = 16
    assert hold not in calls[1:]            # no call for the ended hold (c's own copy of a3 makes one)
    assert [kv.ref_cnt[block] for block in hits] == [1, 1, 1]
    kv.free(c)
    assert not any(kv.ref_cnt) and kv.num_free == 15


@pytest.mark.parametrize("cache", [KvCache, ReferenceKvCache])
def test_stale_copies_past_a_runs_head_are_skipped(cache):
    """A hit takes a head of a chain, so the stale copies in the part of a run being taken are
    usually the part's first blocks (take's short path). Second copies make another shape: B
    computes the prompt A computed; A's deepest blocks are evicted, so B's copies of them become
    the first; a hit then takes A's two left and B's third: B's run has its stale copy at its end.
    Block size 4, trace blocks of 16 tokens (one prefix id: four blocks), 8 usable blocks."""
    kv = cache(num_gpu_blocks=9, block_size=4, enable_caching=True, max_model_len=64)
    interner = PrefixInterner()

    def request(request_id, prompt_len, hash_ids):
        return Request(request_id, 0, 0, prompt_len, 4, 4, BlockKeys(request_id, prompt_len, hash_ids, 4, 16, interner))

    def admit(r, hits):
        assert kv.admit(r, hits, r.num_tokens - 4 * len(hits), has_running=False)
        r.num_computed = r.num_tokens

    a, b = request(0, 16, (0,)), request(1, 16, (0,))
    a_hits, b_hits = kv.lookup(a), kv.lookup(b)           # both before either caches: no hits
    admit(a, a_hits)
    admit(b, b_hits)                                      # b's blocks are second copies of a's
    assert kv.num_free == 0
    a_blocks, b_blocks = list(a.blocks), list(b.blocks)
    kv.free(a)
    e = request(2, 8, None)
    admit(e, [])                                          # takes a3, a2: b's copies of them stay
    assert kv.cached_prefix_blocks(a.keys) == 4
    kv.free(b)                                            # queue: a1 a0 | b3 b2 b1 b0
    c = request(3, 16, (0,))
    c_hits = kv.lookup(c)
    assert c_hits == [a_blocks[0], a_blocks[1], b_blocks[2]]
    admit(c, c_hits)                                      # its fourth block: b3 (a0, a1 stale)
    assert kv.num_free == 2
    if cache is KvCache:
        (run,) = kv.lru
        assert [kv.left_queue.get(block, -1) >= run.serial for block in run] == [False, False, True]
    d = request(4, 8, None)
    admit(d, [])                                          # b1 and b0: b2 is c's, its copy stale
    assert kv.num_free == 0
    assert kv.cached_prefix_blocks(c.keys) == 4           # c's blocks, the only copies left
    for r in (c, d, e):
        kv.free(r)
    assert kv.num_free == 8
    assert len(kv.lookup(request(5, 20, (0,)))) == 4


@pytest.mark.parametrize("other_holds", [False, True])
@pytest.mark.parametrize("cache", [KvCache, ReferenceKvCache])
def test_a_cut_drops_the_keys_of_shared_blocks_past_it_held_alone(cache, other_holds):
    """`free(keep_blocks=…)` (SGLang's retraction) past a shared block: its key goes if the
    request holds it alone, and stays if another request holds it too.

    Block size 4, hash_ids (0, 1) of 8 tokens each over 16 tokens of content (a session turn's
    keys reach over its output): 4 shareable blocks. r's prompt is 8 tokens (blocks s0 s1);
    8 decoded tokens give s2 (keyed: its 4 tokens are known) and s3 (its last token not yet
    computed: unkeyed). 15 usable blocks."""
    kv = cache(num_gpu_blocks=16, block_size=4, enable_caching=True, max_model_len=64)
    interner = PrefixInterner()

    def request(request_id, prompt_len, max_tokens):
        keys = BlockKeys(request_id, 16, (0, 1), 4, 8, interner)
        return Request(request_id, 0, 0, prompt_len, max_tokens, max_tokens, keys)

    r = request(0, 8, 12)
    assert kv.admit(r, kv.lookup(r), 8, has_running=False)
    r.num_computed = 8
    for _ in range(8):
        assert kv.allocate(r, 1)
        r.num_computed += 1
        r.num_output += 1
    s0, s1, s2, s3 = r.blocks
    assert (r.keys.shared_blocks, r.num_cached_blocks, kv.num_free) == (4, 3, 11)
    if other_holds:
        q = request(1, 16, 4)      # (16 - 1) // 4 = 3 blocks hit: s0 s1 s2; a new one for the fourth
        assert kv.lookup(q) == [s0, s1, s2]
        assert kv.admit(q, [s0, s1, s2], 4, has_running=True)
        q.num_computed = 16        # its fourth block keyed: q's content is known to 16
    kv.free(r, finished=False, keep_blocks=2)   # the cut: the prompt's 2 blocks
    probe = request(2, 20, 4)      # (20 - 1) // 4 = 4 blocks may hit
    if other_holds:
        # s2 is q's too: it keeps its key (only its count drops); s3 (unkeyed) goes free.
        # r's readmission (16 tokens known) hits s0 s1 s2, the probe q's fourth block too.
        assert kv.num_free == 15 - 4
        assert kv.lookup(r) == [s0, s1, s2]
        assert kv.lookup(probe)[:3] == [s0, s1, s2] and len(kv.lookup(probe)) == 4
    else:
        # s2 is r's alone: its key goes with the decoded tokens; only the prompt's blocks hit.
        assert kv.num_free == 15
        assert kv.lookup(r) == kv.lookup(probe) == [s0, s1]
        # s2 and s3 are unkeyed: with the 9 never used, an 11-block admission takes them and
        # evicts nothing (the cached s0 s1 are the back of the queue).
        taker = Request(3, 0, 0, 44, 1, 1, BlockKeys(3, 44, None, 4, 8, interner))
        assert kv.admit(taker, [], 44, has_running=False)
        assert sorted(taker.blocks[-2:]) == sorted([s2, s3]) and kv.lookup(r) == [s0, s1]
