"""Prompts whose tails no other request shares: counted up front, kept private, held to the reference.

`PrefixInterner.count_requests` stops interning a prompt at its first hash_id no other prompt
holds, and a finished request's private blocks enter the free queue as its own list, cut in
place (engine/kv/cache.py). Neither may change an answer: the block keys against an interner
that interns every prefix, the fast cache against the reference on random traces that mix
shared heads, private tails, evictions, preemptions and retractions.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim.engine.kv.cache import KvCache
from servesim.engine.kv.reference_cache import ReferenceKvCache
from servesim.engine.request import Request
from servesim.workload.prompt import BlockKeys, PrefixInterner
from servesim.workload.trace import TraceRequest
from tests.test_kv_cache import _OPS, _CompactingKvCache, _drive, _HeadCheckingKvCache


def _trace_request(request_id, hash_ids, input_length, content_length=None):
    return TraceRequest(request_id=request_id, arrival_ns=0, input_length=input_length, output_length=4,
                        hash_ids=tuple(hash_ids), content_length=content_length)


def test_counting_stops_at_the_first_hash_id_no_other_prompt_holds():
    """Trace blocks of 8 tokens, engine blocks of 4. A = (1, 2, 3) and B = (1, 2, 4), 24 tokens
    each, share (1) and (1, 2); 3 and 4 occur once, C = (5, 6) not at all: only the two shared
    prefixes are interned. A's shareable blocks: 2 hash_ids x 8 / 4 = 4 of its 6."""
    trace = [_trace_request(0, (1, 2, 3), 24), _trace_request(1, (1, 2, 4), 24), _trace_request(2, (5, 6), 16)]
    interner = PrefixInterner()
    interner.count_requests(trace, 8)
    assert len(interner._nodes) == 2
    assert sorted(interner.counts.values()) == [2, 2]
    a, b, c = (BlockKeys(t.request_id, t.input_length, t.hash_ids, 4, 8, interner) for t in trace)
    assert (a.shared_blocks, b.shared_blocks, c.shared_blocks) == (4, 4, 0)
    assert a.key(3) == b.key(3) > 0          # tokens 12-15: inside hash_id 2, same prefix (1, 2)
    assert a.key(4) != b.key(4) and a.key(4) < 0 and b.key(4) < 0   # hash_ids 3 and 4: their own
    assert c.chunk_spans() == [] and c.shared_keys(0, 0) == []


def test_a_finished_private_request_frees_its_own_list_as_one_dead_run():
    """A 16-token prompt no one shares (4 blocks of 4, all full and cached) and one more token:
    5 blocks. Its free puts the unfilled fifth at the front of the plain queue and the 4 full
    ones in the LRU queue as one entry, the request's own list cut in place (no copy)."""
    kv = KvCache(num_gpu_blocks=11, block_size=4, enable_caching=True, max_model_len=64)
    interner = PrefixInterner()
    interner.count_requests([_trace_request(0, (7, 8), 16)], 8)
    keys = BlockKeys(0, 16, (7, 8), 4, 8, interner)
    request = Request(0, 0, 0, 16, 4, 4, keys)
    assert keys.shared_blocks == 0
    assert kv.admit(request, kv.lookup(request), 16, has_running=False)
    request.num_computed = 16
    request.num_output = 1
    assert kv.allocate(request, 1)
    blocks = request.blocks
    assert len(blocks) == 5 and request.num_cached_blocks == 4
    fifth = blocks[4]
    kv.free(request)
    assert kv.lru[-1] is blocks and len(blocks) == 4
    assert kv.free_plain == [fifth]
    assert kv.num_free == 10 and kv.keyed_free == 4 and not kv.chunks


# A small alphabet, so that prompts often extend one another; prompts cut short of their
# hash_ids while their content goes on (a session turn's) ask for prefixes past those counted.
_HASH_LISTS = st.lists(st.integers(0, 2), min_size=1, max_size=5)
_TRACES = st.lists(st.tuples(_HASH_LISTS, st.integers(-30, 4), st.sampled_from([None, 0, 9, 40])),
                   min_size=1, max_size=8)


def _every_prefix_counted(trace, trace_block):
    """What `count_requests` answers, by interning every prefix: each prefix tuple's requests."""
    counts = {}
    for t in trace:
        reach = -(-min(t.input_length, len(t.hash_ids) * trace_block) // trace_block)
        for i in range(reach):
            counts[t.hash_ids[:i + 1]] = counts.get(t.hash_ids[:i + 1], 0) + 1
    return counts


def _expected_shared_blocks(t, counts, block, trace_block):
    covered = min(t.content_length or t.input_length, len(t.hash_ids) * trace_block)
    needed = -(-(covered // block) * block // trace_block)
    reach = next((i for i in range(needed) if counts.get(t.hash_ids[:i + 1], 0) < 2), needed)
    if reach < needed:
        covered = min(covered, reach * trace_block)
    return covered // block


@settings(max_examples=300, deadline=None)
@given(rows=_TRACES, block=st.sampled_from([3, 4, 8]))
def test_counted_keys_are_those_of_an_interner_that_interns_every_prefix(rows, block):
    """Repeated hash_ids within a prompt, prompts cut inside a trace block, content past the
    prompt (a session turn's) and engine blocks that straddle trace blocks."""
    trace_block = 8
    trace = []
    for i, (hash_ids, trim, extra) in enumerate(rows):
        input_length = max(1, len(hash_ids) * trace_block + trim)
        trace.append(_trace_request(i, hash_ids, input_length, None if extra is None else input_length + extra))
    interner = PrefixInterner()
    interner.count_requests(trace, trace_block)
    counts = _every_prefix_counted(trace, trace_block)
    owner: dict[int, tuple] = {}
    for t in trace:
        keys = BlockKeys(t.request_id, t.content_length or t.input_length, t.hash_ids, block, trace_block, interner)
        assert keys.shared_blocks == _expected_shared_blocks(t, counts, block, trace_block)
        for j, key in enumerate(keys.shared_keys(0, keys.shared_blocks)):
            assert key == keys.key(j)
            end = (j + 1) * block
            content = (t.hash_ids[:-(-end // trace_block)], end)   # the tokens the block's hash chains over
            assert owner.setdefault(key, content) == content, "one key for two contents"
    assert len(set(owner.values())) == len(owner), "two keys for one content"


_MIXED_PROMPTS = st.lists(
    st.tuples(st.lists(st.integers(0, 1), min_size=1, max_size=2),    # a head other prompts may share
              st.integers(0, 4),                                       # hash_ids of its own after it
              st.integers(-6, 3), st.integers(1, 2)),                  # trim; requests with this prompt
    min_size=2, max_size=6)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prompts=_MIXED_PROMPTS, ops=_OPS, num_gpu_blocks=st.integers(4, 16))
def test_fast_cache_answers_as_the_reference_with_private_tails(prompts, ops, num_gpu_blocks):
    """Shared heads and private tails, counted up front as a trace replay counts them: each
    prompt's own hash_ids (values no other prompt uses) end its shareable blocks, and a prompt
    sent once is private from its first block. Tiny pools evict, preempt and retract."""
    paths = [(tuple(head) + tuple(100 + 10 * index + k for k in range(own)), trim)
             for index, (head, own, trim, _) in enumerate(prompts)]
    answers = []
    for cache in (_HeadCheckingKvCache, _CompactingKvCache, ReferenceKvCache):
        interner = PrefixInterner()
        trace = [_trace_request(0, tuple(i * 3 + h for i, h in enumerate(path)), max(1, len(path) * 8 + trim))
                 for (path, trim), (*_, copies) in zip(paths, prompts) for _ in range(copies)]
        interner.count_requests(trace, 8)
        kv = cache(num_gpu_blocks=num_gpu_blocks, block_size=4, enable_caching=True, max_model_len=96)
        answers.append(_drive(kv, [(list(path), trim) for path, trim in paths], ops, interner))
    assert answers[0] == answers[2]
    assert answers[1] == answers[2]


def _spans_block_by_block(keys, block, trace_block):
    """`chunk_spans` by definition: block j belongs to the prefix id of the trace block holding
    its last token; consecutive blocks of one prefix id make one span."""
    spans = []
    for j in range(keys.shared_blocks):
        end = (j + 1) * block
        node = keys._prefix_ids[-(-end // trace_block) - 1]
        if spans and spans[-1][0] == node and spans[-1][2] == j:
            spans[-1] = (node, spans[-1][1], j + 1, spans[-1][3])
        else:
            spans.append((node, j, j + 1, end))
    return spans


@settings(max_examples=300, deadline=None)
@given(rows=_TRACES, block=st.sampled_from([1, 2, 3, 4, 8]), counted=st.booleans())
def test_chunk_spans_group_the_shared_blocks_by_prefix_id(rows, block, counted):
    """Trace blocks of 8 tokens: engine blocks of 1, 2, 4 and 8 tokens take the aligned path
    (`BlockKeys._aligned_spans`, built in C), 3 the general walk; counted or not (a counted
    interner cuts shared_blocks at a prefix one request reaches)."""
    trace_block = 8
    trace = [_trace_request(i, hash_ids, max(1, len(hash_ids) * trace_block + trim))
             for i, (hash_ids, trim, _) in enumerate(rows)]
    interner = PrefixInterner()
    if counted:
        interner.count_requests(trace, trace_block)
    for t in trace:
        keys = BlockKeys(t.request_id, t.input_length, t.hash_ids, block, trace_block, interner)
        assert keys.chunk_spans() == _spans_block_by_block(keys, block, trace_block)


@pytest.mark.parametrize("cache", [KvCache, ReferenceKvCache])
def test_one_take_evicts_a_preempted_run_of_shared_and_own_keys(cache):
    """A preemption keys the request's own blocks past its shareable ones, and one take can
    evict the whole run: its own keys (the deepest) and its shareable keys go together.
    Block size 4, hash_ids of 8 tokens, 8 blocks (7 usable)."""
    kv = cache(num_gpu_blocks=8, block_size=4, enable_caching=True, max_model_len=64)
    interner = PrefixInterner()
    r = Request(0, 0, 0, 8, 16, 16, BlockKeys(0, 8, (0,), 4, 8, interner))
    assert kv.admit(r, kv.lookup(r), 8, has_running=False)    # s0 s1 (shareable)
    r.num_computed = 8
    for _ in range(8):                                         # 8 outputs: p2 (full, its own) and p3
        assert kv.allocate(r, 1)
        r.num_computed += 1
        r.num_output += 1
    kv.free(r, finished=False)                                 # s0 s1 p2 keep keys; queue p3 | p2 s1 s0
    r.num_computed = 0
    assert len(kv.lookup(r)) == 3 and kv.num_free == 7
    other = Request(1, 0, 0, 28, 4, 4, BlockKeys(1, 28, (5, 6, 7, 8), 4, 8, interner))
    assert kv.admit(other, kv.lookup(other), 28, has_running=False)   # all 7: the run's 3 in one take
    assert kv.num_free == 0
    assert kv.lookup(r) == [] and kv.cached_prefix_blocks(r.keys) == 0
    kv.free(other)
    assert kv.num_free == 7 and kv.lookup(r) == []


def test_own_keys_held_twice_go_key_by_key():
    """`_insert_own` and `_uncache_own` on a key another block holds already: what `_insert`
    and `_uncache` do for each key (the second copy joins the key's list, and leaves it)."""
    kv = KvCache(num_gpu_blocks=8, block_size=4, enable_caching=True, max_model_len=64)
    own = BlockKeys(0, 8, None, 4, 8, PrefixInterner()).private_keys(2, 4)
    assert list(own) == [BlockKeys(0, 8, None, 4, 8, PrefixInterner()).key(j) for j in (2, 3)]
    kv._insert(own[0], 5)
    kv._insert_own(own, [6, 7])
    assert kv.cache == {own[0]: [5, 6], own[1]: 7} and kv.repeated == {own[0]}
    kv._uncache_own(own, [5, 7])
    assert kv.cache == {own[0]: 6} and kv.repeated == set()
    kv._uncache_own(own[:1], [6])
    assert kv.cache == {}
