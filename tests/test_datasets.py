"""Datasets as `vllm bench serve` makes them: prefix_repetition (lengths and prefix structure)."""

from __future__ import annotations

import pytest

import servesim
from servesim.config import load_config
from servesim.errors import ServesimError
from servesim.workload.prefix_repetition import generate_repetition


def _config(synthetic: dict, client: dict | None = None) -> dict:
    sched = {"block_size": 16, "num_gpu_blocks": 1000, "max_model_len": 1024, "max_num_seqs": 16,
             "max_num_batched_tokens": 2048, "async_scheduling": False}
    return {"engine": {"timing": {"kind": "fixed", "pass_ms": 10.0}, "workers": {"aggregated": {"scheduler": sched}}},
            "workload": {"synthetic": synthetic, "client": client or {"mode": "closed_loop", "concurrency": 1}}}


REPETITION = {"num_requests": 7, "output_length": 2,
              "prefix_repetition": {"num_prefixes": 2, "prefix_length": 40, "suffix_length": 10}}


def test_prefix_repetition_by_hand():
    result = servesim.simulate(_config(REPETITION))
    # 7 // 2 = 3 prompts per prefix, 6 in all, each 40 + 10 tokens. One at a time (a closed
    # loop of one): the first prompt of each prefix hits nothing; every later one hits the
    # prefix's 2 full blocks of 16 (32 tokens; block 3 ends at 48, past the 40-token prefix).
    order = [t.hash_ids[0] for t in generate_repetition(load_config(_config(REPETITION)).config.workload.synthetic, 0)]
    assert sorted(order) == [0, 0, 0, 1, 1, 1]
    first_of_each = {order.index(p) for p in (0, 1)}
    assert [(r.input_length, r.cached_tokens) for r in result.requests] == [
        (50, 0 if i in first_of_each else 32) for i in range(6)]
    assert result.summary["completed"] == 6


def test_prefix_repetition_repeats_and_follows_its_seed():
    cfg = load_config(_config(dict(REPETITION, num_requests=40))).config.workload.synthetic
    a, b = list(generate_repetition(cfg, 0)), list(generate_repetition(cfg, 1))
    assert a == list(generate_repetition(cfg, 0)) and a != b
    assert sorted(t.hash_ids[0] for t in a) == sorted(t.hash_ids[0] for t in b) == [0] * 20 + [1] * 20


@pytest.mark.parametrize("edit, says", [
    ({"input_length": 5}, "leave input_length, lengths_from and prefix_length unset"),
    ({"num_requests": 1}, "num_requests (1) must be at least prefix_repetition.num_prefixes (2)"),
    ({"output_length": None}, "prefix_repetition needs output_length"),
])
def test_prefix_repetition_refusals(edit, says):
    synthetic = {k: v for k, v in dict(REPETITION, **edit).items() if v is not None}
    with pytest.raises(ServesimError, match=says.replace("(", r"\(").replace(")", r"\)")):
        servesim.simulate(_config(synthetic))


def test_synthetic_configs_without_it_dump_as_before():
    dumped = load_config(_config({"num_requests": 3, "input_length": 5, "output_length": 2})).config
    assert "prefix_repetition" not in dumped.model_dump(mode="json")["workload"]["synthetic"]
