"""ShareGPT-format lengths through workload.synthetic.lengths_from (workload/sharegpt.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import servesim
from servesim.config import load_config
from servesim.workload.sharegpt import is_sharegpt, sharegpt_lengths

DATA = Path(__file__).parent / "data" / "sharegpt"
SAMPLE = DATA / "sample.json"
TOKENIZER = DATA / "tokenizer.json"


def test_kept_pairs_by_hand_with_the_tokenizer():
    # The fixture's tokenizer: one token per word plus a "<s>" the post-processor adds.
    #   entry a: "hello there how are you" / "i am fine thank you"  -> 5+1, 5+1: kept
    #   entry b: one message; entry c: no conversations             -> dropped, as vLLM does
    #   entry d: "hi" -> 1+1 = 2 < 4                                 -> dropped
    #   entry e: 1100 words + 1 = 1101 > 1024                        -> dropped
    #   entry f: "what is the time now please" / "it is noon" -> 7, 4 (its third message unused): kept
    inputs, outputs = sharegpt_lengths(SAMPLE, TOKENIZER)
    assert inputs.tolist() == [6, 7] and outputs.tolist() == [6, 4]


def test_kept_pairs_by_hand_with_the_approximation():
    # ceil(chars / 4): a: 23 chars -> 6, 19 -> 5: kept. d: 2 -> 1: dropped. e: 5499 -> 1375 > 1024.
    # f: 27 -> 7, "it is noon" 10 -> 3 < 4: dropped (the tokenizer counted 4 and kept it).
    inputs, outputs = sharegpt_lengths(SAMPLE, None)
    assert inputs.tolist() == [6] and outputs.tolist() == [5]


def test_the_sum_limit_is_inclusive(tmp_path):
    # 1024 + 1024 = 2048 is kept, 1024 + 1028 is not (is_valid_sequence: sum > 2048 drops).
    entries = [{"conversations": [{"value": "x" * 4096}, {"value": "y" * 4096}]},
               {"conversations": [{"value": "x" * 4096}, {"value": "y" * 4112}]}]
    path = tmp_path / "s.json"
    path.write_text(json.dumps(entries))
    inputs, outputs = sharegpt_lengths(path, None)
    assert inputs.tolist() == [1024] and outputs.tolist() == [1024]


def test_the_format_is_told_by_the_opening_bracket(tmp_path):
    assert is_sharegpt(SAMPLE, None) and is_sharegpt(SAMPLE, "sharegpt")
    assert not is_sharegpt(SAMPLE, "mooncake")
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 5, "output_length": 2}\n')
    assert not is_sharegpt(trace, None)


def _pairs(**synthetic) -> list[tuple[int, int]]:
    config = {"workload": {"synthetic": {"num_requests": 40, "lengths_from": str(SAMPLE), **synthetic},
                           "client": {"mode": "poisson", "rate": 5.0}},
              "engine": {"timing": {"kind": "fixed", "pass_ms": 10.0}}}
    result = servesim.simulate(config)
    assert result.summary["completed"] == 40
    return [(r.input_length, r.output_length) for r in result.requests]


def test_a_run_draws_only_the_kept_pairs():
    assert set(_pairs(lengths_tokenizer=str(TOKENIZER))) == {(6, 6), (7, 4)}
    assert set(_pairs(lengths_format="sharegpt")) == {(6, 5)}


def test_the_tokenizer_path_is_relative_to_the_config(tmp_path):
    (tmp_path / "c.yaml").write_text(json.dumps({"workload": {"synthetic": {
        "num_requests": 2, "lengths_from": str(SAMPLE), "lengths_tokenizer": "tok/tokenizer.json"}}}))
    loaded = load_config(tmp_path / "c.yaml")
    from servesim.config.resolution import resolve

    spec = resolve(loaded)
    assert spec.config.workload.synthetic.lengths_tokenizer == str((tmp_path / "tok/tokenizer.json").resolve())


def test_configs_without_a_tokenizer_dump_as_before():
    config = load_config({"workload": {"synthetic": {"num_requests": 2, "lengths_from": "x.jsonl"}}}).config
    assert "lengths_tokenizer" not in config.model_dump()["workload"]["synthetic"]


@pytest.mark.parametrize("entries, says", [
    ({"conversations": []}, "holds a JSON dict"),
    ([{"conversations": "hi"}], "entry 0: conversations must be a list"),
    ([{"conversations": [{"from": "human"}, {"value": "x"}]}], "entry 0: message 0 needs a text"),
])
def test_malformed_files_name_the_entry(tmp_path, entries, says):
    from servesim.errors import ServesimError

    path = tmp_path / "s.json"
    path.write_text(json.dumps(entries))
    with pytest.raises(ServesimError, match=says):
        sharegpt_lengths(path, None)
