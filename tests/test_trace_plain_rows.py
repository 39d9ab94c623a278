"""The plain-row path of JSON-lines traces (workload/trace.py `_plain_row`) against the checking path.

A row both paths accept gives the same values; a row the plain path sends on gets the checking
path's own sentence, so error messages do not depend on which path saw the row first."""
import json

import pytest
from hypothesis import given, settings, strategies as st

from servesim.errors import ServesimError
from servesim.workload import trace
from servesim.workload.trace import TraceError, _JSONL_KEYS, _checked_row, _plain_row, load_trace

values = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**9), st.floats(allow_nan=True),
                   st.text(max_size=3), st.lists(st.one_of(st.integers(-3, 3), st.booleans()), max_size=4))
rows = st.dictionaries(st.sampled_from(["timestamp", "input_length", "output_length", "hash_ids", "extra"]),
                       values, max_size=5)


@settings(max_examples=400, deadline=None)
@given(rows)
def test_plain_path_agrees_with_the_checking_path(row):
    line = json.dumps(row)
    plain = _plain_row(json.loads(line), _JSONL_KEYS)
    try:
        checked, _ = _checked_row(line, "t line 1", _JSONL_KEYS, "mooncake")
    except ServesimError:   # TraceError, or a limit's own sentence
        assert plain is None
        return
    if plain is not None:
        assert plain == checked


def test_plain_row_values_by_hand():
    # 5 ms -> 5,000,000 ns; hash_ids as a tuple.
    row = {"timestamp": 5, "input_length": 32, "output_length": 2, "hash_ids": [7, 8]}
    assert _plain_row(row, _JSONL_KEYS) == (5_000_000, 32, 2, (7, 8))
    # Floats, bools, zero lengths and unknown keys go to the checking path.
    for bad in ({"timestamp": 5.5}, {"input_length": True}, {"output_length": 0}, {"x": 1}):
        assert _plain_row({**row, **bad}, _JSONL_KEYS) is None


def test_a_bad_row_reaches_the_checking_path(tmp_path, monkeypatch):
    calls = []
    real = trace._checked_row
    monkeypatch.setattr(trace, "_checked_row", lambda *a: calls.append(a[1]) or real(*a))
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 4, "output_length": 1}\n'
                    '{"timestamp": 1, "input_length": 0, "output_length": 1}\n')
    with pytest.raises(TraceError, match="line 2: input_length must be at least 1, got 0"):
        load_trace(path, "mooncake")
    assert calls == [f"{path} line 2"]   # line 1 was plain
