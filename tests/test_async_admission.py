"""Async-scheduling admission timing, pinned on the issue's hand-checked table.

Fixed 10 ms passes. Request A arrives at 0 with 8 prompt tokens and 4 output
tokens, so it runs passes [0,10) (prefill, token 1), [10,20), [20,30), [30,40)
(token 4, finished at 40). B has 8 prompt tokens and 1 output token, so B's
TTFT is the end of the one pass that prefills it minus its arrival.
"""

import pytest

A = {"timestamp": 0, "input_length": 8, "output_length": 4}


def _b(at_ms):
    return {"timestamp": at_ms, "input_length": 8, "output_length": 1}


# (B's arrival, TTFT sync, TTFT async)
TABLE = [
    # mid-pass: sync runs B in [20,30) → 30-15; async reads B at 20, commits it behind
    # the already-queued [20,30) pass, so it runs [30,40) → 40-15.
    (15, 15, 25),
    # pass end: sync runs [20,30) → 10; async counts it a reaction to [10,20), reads it
    # at 30 and commits it behind [30,40): runs [40,50) → 50-20.
    (20, 10, 30),
    # pass end with the queued pass empty (A's last token already in flight): sync
    # [30,40) → 10; async reads at 40, the empty queued pass takes no time, [40,50) → 20.
    (30, 10, 20),
    # mid-pass, queued pass empty: both run [40,50) → 50-35.
    (35, 15, 15),
    # A has just finished at 40: the engine is idle, both run [40,50) → 10.
    (40, 10, 10),
    # idle engine: [100,110) → 10.
    (100, 10, 10),
]


@pytest.mark.parametrize("b_at,sync_ttft,async_ttft", TABLE)
def test_issue_table(run, b_at, sync_ttft, async_ttft):
    sync = run([A, _b(b_at)], async_scheduling=False)
    asyn = run([A, _b(b_at)])  # async_scheduling unset: vLLM's default, on
    assert sync.ttft_ms(1) == sync_ttft
    assert asyn.ttft_ms(1) == async_ttft
    # A itself is unaffected in every row: first token at 10, finished at 40.
    for r in (sync, asyn):
        assert r.by_id[0].first_token_ns == 10_000_000
        assert r.by_id[0].finish_ns == 40_000_000


def test_async_default_resolves_on(run):
    r = run([A])
    assert r.result.config.engine.workers.aggregated.scheduler.async_scheduling is True


@pytest.mark.parametrize("run", ["reference"], indirect=True)   # speculative decoding runs the reference
def test_ngram_drafts_make_default_synchronous(run):
    spec = {"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 0.6}
    r = run([A, _b(15)], config_extra={"engine.workers.aggregated.speculative": spec})
    assert r.result.config.engine.workers.aggregated.scheduler.async_scheduling is False
    assert r.ttft_ms(1) == 15  # the synchronous answer from the table


def test_async_a_alone_runs_four_back_to_back_passes(run):
    r = run([A])
    # Async commits pass k+1 while k runs, but A never gets a pass beyond its 4th token.
    assert [(p["start_ms"], p["end_ms"]) for p in r.passes] == [(0, 10), (10, 20), (20, 30), (30, 40)]
    assert r.schedule() == [{0: 8}, {0: 1}, {0: 1}, {0: 1}]
