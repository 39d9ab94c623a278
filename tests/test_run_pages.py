"""One-token pages: a run's page count in closed form (`DecodeRuns._quiet_pages`, `_run_pages`,
`_pages_fitting`) against the request-by-request count it replaces (`_run_blocks`,
`_steps_fitting`), on hand-built batches. The engine-level differential tests
(test_sglang_fast_decode.py, test_decode_runs.py, test_fast_engine.py) hold the runs built on
it to the reference scheduler; SGLang's batches there always meet the closed form's
conditions, so this test is where the general count and the closed form meet directly."""

from __future__ import annotations

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
