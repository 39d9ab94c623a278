"""sessions.max_context_tokens: old turns dropped as a chat front-end drops them (workload/context_cap.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import servesim
from servesim.config import load_config
from servesim.errors import ServesimError
from tests.test_sessions import _config, _turns

CAPPED = {"num_sessions": 1, "turns": 5, "first_input_length": 100, "input_length": 20, "output_length": 20,
          "max_context_tokens": 200}


@pytest.mark.parametrize("reference", [False, True])
def test_a_capped_session_by_hand(reference):
    config = _config(CAPPED)
    config["engine"]["reference"] = reference
    result = servesim.simulate(config)
    rows = [(r.input_length, r.cached_tokens) for r in _turns(result)[0]]
    # Each turn adds its question (100, then 20) and its 20-token answer to the context.
    #   turn 0: 100.            turn 1: 100 + 20 + 20 = 140.    turn 2: 140 + 20 + 20 = 180.
    #   turn 3: 180 + 20 + 20 = 220 > 200: drop turn 0 (100 + 20) -> 220 - 120 = 100, a cut.
    #   turn 4: 100 + 20 + 20 = 140.
    # Hits (blocks of 16, a cache that keeps everything): a turn hits the full blocks of the
    # tokens the turn before computed, its prompt and all but its last output token:
    #   turn 1: floor((100 + 19) / 16) = 7 blocks, 112.  turn 2: floor((140 + 19) / 16) = 9, 144.
    #   turn 3: the cut stream begins with what was turn 1, at position 0: nothing cached.
    #   turn 4: floor((100 + 19) / 16) = 7 blocks of the cut stream, 112.
    assert rows == [(100, 0), (140, 112), (180, 144), (100, 0), (140, 112)]
    assert result.summary["sessions"]["truncated_turns"] == 1


def test_the_system_prompt_survives_a_cut():
    # A shared system prompt of S = 32 tokens and a first question of 68: the first prompt is
    # 100 tokens as above, turns 0-2 the same. The cut drops turn 0's own 68 + 20 tokens, not
    # the system prompt, and the cut stream still opens with it: 2 engine blocks (32 tokens).
    sessions = dict(CAPPED, first_input_length=68, system_prompt_length=32)
    result = servesim.simulate(_config(sessions))
    rows = [(r.input_length, r.cached_tokens) for r in _turns(result)[0]]
    #   turn 3: 220 - (68 + 20) = 132 (the system prompt stays): hits 32.
    #   turn 4: 132 + 40 = 172: floor((132 + 19) / 16) = 9 blocks, 144.
    assert rows == [(100, 0), (140, 112), (180, 144), (132, 32), (172, 144)]


def test_without_a_cap_nothing_changes():
    plain = dict(CAPPED)
    del plain["max_context_tokens"]
    result = servesim.simulate(_config(plain))
    assert [r.input_length for r in _turns(result)[0]] == [100, 140, 180, 220, 260]
    assert "truncated_turns" not in result.summary["sessions"]
    dumped = load_config({"workload": {"sessions": plain}}).config.model_dump()["workload"]["sessions"]
    assert "max_context_tokens" not in dumped


def test_a_cap_that_cannot_hold_a_question_is_refused():
    with pytest.raises(ServesimError, match=r"must hold the system prompt and the longest question \(8 \+ 100"):
        load_config({"workload": {"sessions": dict(CAPPED, system_prompt_length=8, max_context_tokens=107)}})
    load_config({"workload": {"sessions": dict(CAPPED, system_prompt_length=8, max_context_tokens=108)}})


@settings(max_examples=20, deadline=None)
@given(cap=st.integers(300, 900), system=st.sampled_from([0, 32]), seed=st.integers(0, 50))
def test_no_prompt_exceeds_the_cap_and_every_cut_is_counted(cap, system, seed):
    sessions = {"num_sessions": 4, "turns": {"min": 1, "max": 6}, "input_length": {"min": 10, "max": 200},
                "output_length": {"min": 5, "max": 120}, "system_prompt_length": system,
                "max_context_tokens": cap, "seed": seed}
    result = servesim.simulate(_config(sessions))
    turns = _turns(result)
    cuts = 0
    for records in turns.values():
        for before, after in zip(records, records[1:]):
            assert after.input_length <= cap
            # Uncut, a turn's prompt is the one before plus its answer plus a new question.
            cuts += after.input_length <= before.input_length + before.output_length
    assert all(r.input_length <= cap for r in result.requests)
    assert cuts <= result.summary["sessions"]["truncated_turns"]
