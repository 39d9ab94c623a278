"""Router decision tables on tiny fleets: Dynamo's kv_aware cost and llm-d's scorers,
worked out by hand (docs/modeling/routing.md)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from servesim.cluster.kv_router import KvAwareSelector, softmax_pick
from servesim.cluster.llm_d_router import LlmDPicker
from servesim.config.router_config import LlmDConfig, RouterConfig
from servesim.workload.prompt import PrefixInterner
from servesim.workload.trace import TraceRequest


class Keys:
    """A prompt whose first `shared` blocks are shareable: one run of prefix id 1."""

    def __init__(self, shared: int) -> None:
        self.shared_blocks = shared

    def chunk_spans(self):
        return [(1, 0, self.shared_blocks, 16)] if self.shared_blocks else []


def _worker(cached: int = 0, used: int = 0, usable: int = 100, waiting: int = 0, block_size: int = 16):
    kv = SimpleNamespace(block_size=block_size, num_used=used, num_usable=usable,
                         cached_prefix_blocks=lambda keys, c=cached: min(c, keys.shared_blocks))
    return SimpleNamespace(scheduler=SimpleNamespace(kv=kv, waiting=[None] * waiting), intake=[])


def _request(first_token_ns=None):
    return SimpleNamespace(first_token_ns=first_token_ns)


def _rng():
    return np.random.default_rng(7)


# ---------------------------------------------------------------- kv_aware (Dynamo)

def test_kv_aware_decision_table():
    # Three workers, block size 16. Worker 0 caches the prompt's first 4 blocks, worker 2 caches 2.
    workers = [_worker(cached=4), _worker(), _worker(cached=2)]
    sel = KvAwareSelector(workers, overlap_score_weight=1.0, temperature=0.0, rng_source=_rng)
    keys = Keys(shared=5)
    # Request A: 100 tokens (6 full blocks, the first 5 shareable). Nothing tracked yet:
    #   w0: prefill (100 - 4·16) / 16 = 2.25, decode 0 + 6 = 6 → 8.25
    #   w1: prefill 100/16 = 6.25, decode 6 → 12.25
    #   w2: prefill (100 - 32)/16 = 4.25, decode 6 → 10.25
    costs, _ = sel.costs(100, lambda w: keys, now=0)
    assert costs == [8.25, 12.25, 10.25]
    a = _request()
    assert sel.choose(100, lambda w: keys, now=0) == 0
    sel.sent(0, a)
    # Request B, the same prompt, at t=1 while A's prefill (36 tokens) is still queued on w0:
    #   w0: prefill (36 + 36)/16 = 4.5, decode 6 active + 1 new (its unique 6th block) = 7 → 11.5
    #   w1: 12.25 as before; w2: 10.25 as before → w2.
    costs, _ = sel.costs(100, lambda w: keys, now=1)
    assert costs == [11.5, 12.25, 10.25]
    b = _request()
    assert sel.choose(100, lambda w: keys, now=1) == 2
    sel.sent(2, b)
    # A's first token comes back at t=5: its prefill tokens leave w0's count, its blocks stay.
    a.first_token_ns = 5
    #   w0: prefill 36/16 = 2.25, decode 6 + 1 = 7 → 9.25 (at t=6)
    costs, _ = sel.costs(100, lambda w: keys, now=6)
    assert costs[0] == 9.25
    # A finishes: w0 is back to 8.25.
    sel.returned(0, a)
    costs, _ = sel.costs(100, lambda w: keys, now=7)
    assert costs[0] == 8.25
    assert sel.sequences[0].active_blocks() == 0 and sel.sequences[0].prefill_tokens == 0


def test_kv_aware_weight_trades_cache_for_load():
    # w0 caches 4 of 5 blocks but holds 20 active blocks; w1 is empty. Prompt 80 tokens (5 blocks).
    #   weight 1: w0 = 1·(80-64)/16 + 20 + 5 = 26, w1 = 5 + 5 = 10 → w1
    #   weight 8: w0 = 8·1 + 25 = 33, w1 = 8·5 + 5 = 45 → w0
    for weight, want in ((1.0, 1), (8.0, 0)):
        workers = [_worker(cached=4), _worker()]
        sel = KvAwareSelector(workers, weight, 0.0, _rng)
        busy = _request(first_token_ns=0)
        sel.choose(320, lambda w: Keys(0), now=0)   # 20 unique full blocks, 320 prefill tokens
        sel._chosen.prefill_tokens = 0
        sel.sent(0, busy)
        assert sel.choose(80, lambda w: Keys(5), now=1) == want


def test_kv_aware_counts_a_shared_prefix_once():
    # Real block keys (16-token engine blocks, 64-token trace blocks): A = [1, 2, 3] (192
    # tokens, 12 blocks), B = [1, 2, 9] (12 blocks, the first 8 A's), C = [1] (64 tokens, 4
    # blocks, A's first 4). Trace blocks 3 and 9 are one request's each, so A's and B's last
    # 4 blocks are their own. Tracking A leaves B's own 4 blocks new and none of C's (A's
    # own 4 would be new again to another request: no one else can hold them).
    from servesim.cluster.kv_router import Sequence, WorkerSequences, shared_runs
    from servesim.workload.prompt import BlockKeys

    interner = PrefixInterner()
    rows = [TraceRequest(i, 0, n, 1, ids) for i, (n, ids) in enumerate([(192, (1, 2, 3)), (192, (1, 2, 9)),
                                                                       (64, (1,))])]
    interner.count_requests(rows, 64)
    keys = [BlockKeys(r.request_id, r.input_length, r.hash_ids, 16, 64, interner) for r in rows]
    tracked = WorkerSequences()
    seqs = [Sequence(shared_runs(k), r.input_length // 16 - k.shared_blocks, 0) for k, r in zip(keys, rows)]
    assert [tracked.new_blocks(s) for s in seqs] == [12, 12, 4]
    tracked.add(seqs[0], _request())
    assert [tracked.new_blocks(s) for s in seqs] == [4, 4, 0]
    b = _request()
    tracked.add(seqs[1], b)
    # 16 distinct blocks, as a set of every block key of A and B counts them.
    distinct = {k.key(i) for k, r in zip(keys[:2], rows) for i in range(r.input_length // 16)}
    assert tracked.active_blocks() == len(distinct) == 16
    tracked.remove(b)
    assert tracked.active_blocks() == 12 and tracked.new_blocks(seqs[1]) == 4


def test_kv_aware_ties_go_to_the_lowest_index():
    sel = KvAwareSelector([_worker(), _worker()], 1.0, 0.0, _rng)
    assert sel.choose(64, None, now=0) == 0


def test_softmax_pick_by_hand():
    # Costs 1 and 3 (range 2), temperature 1: scaled −0.5 and −1.5, weights 1 and e^-1:
    # P(w0) = 1 / (1 + e^-1) = 0.7311.
    assert softmax_pick([1.0, 3.0], 1.0, 0.73) == 0
    assert softmax_pick([1.0, 3.0], 1.0, 0.74) == 1
    assert softmax_pick([2.0, 2.0, 2.0], 0.5, 0.5) == 1     # all equal: uniform thirds


def test_kv_aware_temperature_is_seeded():
    def picks(seed):
        sel = KvAwareSelector([_worker(cached=4), _worker(), _worker()], 1.0, 1.0,
                              lambda: np.random.default_rng(seed))
        return [sel.choose(100, lambda w: Keys(5), now=0) for _ in range(40)]
    assert picks(3) == picks(3)
    assert len(set(picks(3))) > 1


# ---------------------------------------------------------------- llm_d

def _trace(request_id, hash_ids, input_length=256):
    return TraceRequest(request_id, 0, input_length, 4, tuple(hash_ids))


def _picker(workers, **cfg):
    interner = PrefixInterner()
    factory = SimpleNamespace(trace_block_size=64, interner=interner)
    return LlmDPicker(LlmDConfig(**cfg), workers, factory, _rng)


def test_llm_d_decision_table():
    # Two workers; w0 has 3 waiting and 60% KV used, w1 1 waiting and 20% used.
    workers = [_worker(waiting=3, used=60), _worker(waiting=1, used=20)]
    picker = _picker(workers, metrics_interval_ms=0)
    # First request (4 blocks of 64 tokens), nothing remembered:
    #   w0: 3·0 + 2·(3-3)/(3-1) + 2·(1-0.6) = 0.8;  w1: 0 + 2·1 + 2·0.8 = 3.6 → w1
    r0 = _trace(0, [1, 2, 3, 4])
    assert picker.scores(picker.prompt_hashes(r0), 0) == pytest.approx([0.8, 3.6])
    assert picker.choose(r0, 0) == 1
    picker.sent(1)
    # w1 fills up: 3 waiting on each now, w1 90% used. A request sharing 2 of the 4 blocks:
    #   w0: 0 + 2·1 + 2·0.4 = 2.8;  w1: 3·2/4 + 2·1 + 2·0.1 = 3.7 → w1 (affinity)
    workers[1].scheduler.waiting = [None] * 3
    workers[1].scheduler.kv.num_used = 90
    r1 = _trace(1, [1, 2, 7, 8])
    assert picker.scores(picker.prompt_hashes(r1), 1) == pytest.approx([2.8, 3.7])
    assert picker.choose(r1, 1) == 1
    # Without the prefix weight the load wins: w0 2.8 > w1 2.2.
    plain = _picker(workers, prefix_cache_weight=0.0, metrics_interval_ms=0)
    assert plain.choose(r1, 1) == 0


def test_llm_d_load_aware_scorer():
    from servesim.cluster.llm_d_router import load_aware
    assert load_aware(0, 128) == 0.5
    assert load_aware(64, 128) == 0.25      # 0.5 · (1 − 64/128)
    assert load_aware(500, 128) == 0.0


def test_llm_d_routes_on_the_last_scrape():
    # Scrapes every 50 ms: a queue that builds up at 10 ms is seen only from 50 ms on.
    workers = [_worker(), _worker(waiting=2)]
    picker = _picker(workers, prefix_cache_weight=0.0, kv_cache_utilization_weight=0.0)
    assert picker.choose(_trace(0, [1]), 0) == 0
    workers[0].scheduler.waiting = [None] * 5
    assert picker.choose(_trace(1, [2]), 10_000_000) == 0         # stale: w0 still 0 waiting
    assert picker.choose(_trace(2, [3]), 50_000_000) == 1         # fresh scrape: 5 against 2


def test_llm_d_lru_forgets_the_oldest_blocks():
    workers = [_worker(), _worker()]
    picker = _picker(workers, lru_capacity_per_server=4, metrics_interval_ms=0)
    picker.choose(_trace(0, [1, 2, 3, 4]), 0)
    picker.sent(0)
    picker.choose(_trace(1, [5, 6], input_length=128), 0)
    picker.sent(0)                            # 6 blocks sent, the last 4 kept: those of 3, 4, 5, 6
    assert len(picker.lru[0]) == 4
    hashes = picker.prompt_hashes(_trace(2, [1, 2, 3, 4]))
    assert hashes[0] not in picker.lru[0] and hashes[2] in picker.lru[0]


def test_llm_d_ties_are_seeded():
    def picks(seed):
        workers = [_worker(), _worker(), _worker()]
        picker = LlmDPicker(LlmDConfig(), workers, SimpleNamespace(trace_block_size=64, interner=PrefixInterner()),
                            lambda: np.random.default_rng(seed))
        return [picker.choose(_trace(i, [100 + i]), 0) for i in range(30)]
    assert picks(1) == picks(1) and len(set(picks(1))) == 3


# ---------------------------------------------------------------- config

def test_overlap_weight_is_an_alias():
    assert RouterConfig.model_validate({"overlap_weight": 2.5}).overlap_score_weight == 2.5
    assert RouterConfig.model_validate({"overlap_score_weight": 1.5}).overlap_weight == 1.5


# ---------------------------------------------------------------- bookkeeping property

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_CHAINS = st.lists(st.tuples(st.lists(st.integers(1, 4), min_size=0, max_size=4), st.integers(1, 300)),
                   min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(_CHAINS, st.data())
def test_run_bookkeeping_counts_the_distinct_blocks_of_every_key(prompts, data):
    """Against a plain set of every block key: the runs count the same distinct blocks, and
    new_blocks the same blocks missing, after any order of adds and removes."""
    from servesim.cluster.kv_router import Sequence, WorkerSequences, shared_runs
    from servesim.workload.prompt import BlockKeys

    interner = PrefixInterner()
    # Hash ids drawn from a small alphabet, made chains (the trace's prefix property): id
    # of position i depends on the ids before it.
    rows = []
    for i, (ids, length) in enumerate(prompts):
        chain = tuple(hash((tuple(ids[:j + 1]),)) % 10_000 for j in range(len(ids)))
        rows.append(TraceRequest(i, 0, length, 1, chain or None))
    interner.count_requests(rows, 64)
    keys = [BlockKeys(r.request_id, r.input_length, r.hash_ids, 16, 64, interner) for r in rows]
    seqs = [Sequence(shared_runs(k), r.input_length // 16 - k.shared_blocks, 0) for k, r in zip(keys, rows)]
    full_keys = [{k.key(j) for j in range(r.input_length // 16)} for k, r in zip(keys, rows)]
    tracked, held, requests = WorkerSequences(), [], [_request() for _ in rows]
    for _ in range(2 * len(rows)):
        i = data.draw(st.integers(0, len(rows) - 1))
        if i in held:
            tracked.remove(requests[i])
            held.remove(i)
        else:
            tracked.add(seqs[i], requests[i])
            held.append(i)
        union = set().union(*(full_keys[h] for h in held)) if held else set()
        assert tracked.active_blocks() == len(union)
        for j in range(len(rows)):
            want = len(full_keys[j] - union) if j not in held else None
            if want is not None:
                assert tracked.new_blocks(seqs[j]) == want
