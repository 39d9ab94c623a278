"""Dynamo 1.2's kv_aware cost (router.dynamo_version: "1.2"): overlap_score_credit,
prefill_load_scale, the credit's decay and the drawn tie-break, worked out by hand
(docs/modeling/routing.md)."""

from __future__ import annotations

import numpy as np
import pytest

import servesim
from servesim.cluster.kv_router import KvAwareSelector, OverlapCredit
from servesim.errors import ServesimError
from tests.test_routers import Keys, _request, _rng, _worker


def _three(credit: OverlapCredit) -> KvAwareSelector:
    # Worker 0 caches the prompt's first 4 blocks, worker 2 caches 2 (block size 16).
    return KvAwareSelector([_worker(cached=4), _worker(), _worker(cached=2)], 1.0, 0.0, _rng, None, credit)


def test_the_defaults_are_the_0_7_cost():
    # raw prefill 100/16 = 6.25 blocks less the cached blocks, + 6 decode blocks:
    # w0 6.25 - 4 + 6 = 8.25, w1 12.25, w2 6.25 - 2 + 6 = 10.25 (the 0.7 table's figures).
    costs, _ = _three(OverlapCredit(1.0, 1.0, 0.0)).costs(100, lambda w: Keys(5), now=0)
    assert costs == [8.25, 12.25, 10.25]


def test_credit_and_scale():
    # credit 0.5: w0 6.25 - 0.5·4 + 6 = 10.25, w1 12.25, w2 6.25 - 0.5·2 + 6 = 11.25.
    costs, _ = _three(OverlapCredit(0.5, 1.0, 0.0)).costs(100, lambda w: Keys(5), now=0)
    assert costs == [10.25, 12.25, 11.25]
    # scale 2 applies after the credit: w0 2·(6.25 - 4) + 6 = 10.5, w1 2·6.25 + 6 = 18.5.
    costs, _ = _three(OverlapCredit(1.0, 2.0, 0.0)).costs(100, lambda w: Keys(5), now=0)
    assert costs == [10.5, 18.5, 14.5]


def test_the_credit_decays_with_queued_prefill_above_the_least():
    # 64 tokens queued (4 blocks) above the least-loaded worker, a 100-token prompt (7 blocks):
    # decay 1.75 → credit 1 / (1 + 1.75·4/7) = 0.5; raw (64 + 100)/16 = 10.25; 10.25 - 0.5·4 = 8.25.
    assert OverlapCredit(1.0, 1.0, 1.75).prefill_cost(64, 100, 4, 16, 0) == 8.25
    # The least-loaded worker keeps its whole credit: (64 + 100)/16 - 4 = 6.25.
    assert OverlapCredit(1.0, 1.0, 1.75).prefill_cost(64, 100, 4, 16, 64) == 6.25
    # In the selector: A (100 tokens, 36 of them past w0's cache) is queued on w0, so w0 has
    # 36 tokens (2.25 blocks) above the others; B, the same prompt, then costs on w0
    # (36 + 100)/16 - 4/(1 + 1·2.25/7) + 7 = 8.5 - 3.0270... + 7.
    sel = _three(OverlapCredit(1.0, 1.0, 1.0))
    assert sel.choose(100, lambda w: Keys(5), now=0) == 0
    sel.sent(0, _request())
    costs, _ = sel.costs(100, lambda w: Keys(5), now=1)
    assert costs[0] == pytest.approx(8.5 - 4 / (1 + 2.25 / 7) + 7)
    assert costs[1:] == [12.25, 10.25]


class _Draws:
    """A stand-in for the router's stream: integers(n) returns the next of `values`."""

    def __init__(self, values):
        self.values = list(values)
        self.asked = []

    def integers(self, n):
        self.asked.append(n)
        return self.values.pop(0)


def test_ties_are_drawn_among_equal_costs():
    # Three empty workers cost the same. Row 0 is the pick; row 1 ties (2 so far): a draw of 0
    # of integers(2) takes it; row 2 ties (3): a draw of 1 of integers(3) keeps row 1.
    draws = _Draws([0, 1])
    sel = KvAwareSelector([_worker(), _worker(), _worker()], 1.0, 0.0, lambda: draws, None,
                          OverlapCredit(1.0, 1.0, 0.0))
    assert sel.choose(100, lambda w: Keys(5), now=0) == 1
    assert draws.asked == [2, 3]
    # Each tied worker equally often from a seeded stream (6,000 choices: 2,000 ± 4 σ).
    sel = KvAwareSelector([_worker(), _worker(), _worker()], 1.0, 0.0, lambda: np.random.default_rng(3), None,
                          OverlapCredit(1.0, 1.0, 0.0))
    picks = np.bincount([sel.choose(100, lambda w: Keys(5), now=0) for _ in range(6000)], minlength=3)
    assert all(abs(p - 2000) < 4 * (6000 * 2 / 9) ** 0.5 for p in picks)


def test_0_7_and_1_2_keys_stay_apart():
    with pytest.raises(ServesimError, match="prefill_load_scale instead"):
        servesim.simulate(overrides=[("router.dynamo_version", "1.2"), ("router.overlap_score_weight", 2.0)])
    with pytest.raises(ServesimError, match="dynamo_version"):
        servesim.simulate(overrides=[("router.overlap_score_credit", 0.5)])
    with pytest.raises(ServesimError, match="overlap_score_credit"):
        servesim.simulate(overrides=[("router.dynamo_version", "1.2"), ("router.overlap_score_credit", 1.5)])
