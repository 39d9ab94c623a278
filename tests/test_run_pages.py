"""One-token pages: a run's page count in closed form (`DecodeRuns._quiet_pages`, `_run_pages`,
`_pages_fitting`) against the request-by-request count it replaces (`_run_blocks`,
`_steps_fitting`), on hand-built batches. The engine-level differential tests
(test_sglang_fast_decode.py, test_decode_runs.py, test_fast_engine.py) hold the runs built on
it to the reference scheduler; SGLang's batches there always meet the closed form's
conditions (after a decode pass a one-token-page request holds exactly its computed tokens), so
this is where the closed form meets the general count directly, and where `_quiet_pages` takes
its general way (a spare page, the context limit inside the run) against the run's definition."""

from __future__ import annotations

import random
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.engine.decode_runs import DecodeRuns


class _Runs(DecodeRuns):
    def __init__(self, max_len: int) -> None:
        self.kv = SimpleNamespace(block_size=1)
        self.max_model_len = max_len
        self._run_deficit = None


def _entries(pairs):
    """(computed, pages held) per request, pages at most computed (none spare)."""
    return [SimpleNamespace(request=SimpleNamespace(num_computed=c, blocks=[0] * b)) for c, b in pairs]


_BATCH = st.lists(st.integers(1, 300).flatmap(lambda c: st.tuples(st.just(c), st.integers(max(0, c - 3), c))),
                  min_size=1, max_size=12)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(_BATCH, st.integers(2, 200), st.integers(0, 1), st.integers(0, 3000))
def test_closed_form_pages_match_the_count(pairs, cap, behind, free):
    entries = _entries(pairs)
    latest = max(c for c, _ in pairs)
    runs = _Runs(max_len=latest + cap - 1 + behind)   # the context limit is not reached in the run
    runs._run_deficit = sum(c - b for c, b in pairs)
    for steps in range(0, cap + behind):
        assert runs._run_pages(entries, steps) == runs._run_blocks(entries, steps)
    if runs._run_blocks(entries, cap - 1 + behind) > free:
        closed = runs._pages_fitting(runs._run_deficit, len(entries), free, behind)
        assert closed < cap
        assert max(closed, 1) == runs._steps_fitting(entries, free, behind, cap)


def _decoding(pairs, prompt=10, max_tokens=100):
    """Committed one-token decode entries: (computed, pages held) per request, `prompt` + outputs."""
    entries = []
    for c, b in pairs:
        request = SimpleNamespace(num_computed=c, blocks=[0] * b, stale=0, prompt_len=prompt,
                                  max_tokens=max_tokens, num_output=c - prompt)
        entries.append(SimpleNamespace(request=request, is_decode=True, tokens=1, drafts=0, computed_before=c - 1))
    return entries


def _brute_cap(runs, entries, limit, free, behind):
    """The longest run by the definition: every request short of its last token, passes 2..k (+ behind) fit."""
    cap = min([limit] + [min(e.request.max_tokens, runs.max_model_len - e.request.prompt_len) - e.request.num_output
                         for e in entries])
    while cap >= 2 and runs._run_blocks(entries, cap - 1 + behind) > free:
        cap -= 1
    return cap if cap >= 2 else 0


def test_quiet_pages_sizes_runs_as_the_definition():
    """`_quiet_pages` on batches that meet the closed form's conditions and on ones that do not (a
    spare page held, the context limit inside the run), against the run length by definition,
    on 600 seeded random batches; both of its ways ran."""
    rng = random.Random(24)
    ways = {"closed": 0, "general": 0}
    for _ in range(600):
        pairs = [(c, c + rng.choice((-1, 0, 0, 0, 1))) for c in
                 (rng.randint(12, 60) for _ in range(rng.randint(1, 8)))]
        max_len = rng.randint(61, 200)
        behind, free, limit = rng.randint(0, 1), rng.randint(0, 400), rng.randint(2, 80)
        entries = _decoding(pairs)
        runs = _Runs(max_len=max_len)
        runs.kv = SimpleNamespace(block_size=1, num_free=free)
        runs.async_scheduling = bool(behind)
        assert runs._quiet_pages(entries, limit, 0) == _brute_cap(runs, entries, limit, free, behind)
        ways["closed" if runs._run_deficit is not None else "general"] += 1
    assert ways["closed"] > 0 and ways["general"] > 0
