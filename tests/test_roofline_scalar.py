"""The roofline's scalar and memoised paths give the same integers as the general ones.

RooflineTimingModel prices short decode runs in scalar arithmetic (decode_steps_list), a pass's
decode attention without numpy checks (_decode_attention_scalar) and memoises _fixed_seconds;
each must be bit-for-bit what the numpy / uncached formula gives.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.hardware import resolve_gpu
from servesim.hardware.deployment import Deployment
from servesim.models import resolve_model
from servesim.timing import roofline
from servesim.timing.base import PassShape
from servesim.timing.roofline import RooflineProfile, RooflineTimingModel

NAMES = ["llama-3.1-8b", "llama-3.1-70b", "gpt-oss-120b", "deepseek-v3", "qwen3-235b-a22b"]


def _model(name: str, tp: int = 4) -> RooflineTimingModel:
    a = resolve_model(name).arch
    return RooflineTimingModel(Deployment(a, resolve_gpu("b200"), "fp8", "fp8", tp=tp, ep=tp if a.experts else 1),
                               RooflineProfile())


MODELS = {name: _model(name) for name in NAMES}


def test_some_model_has_sliding_layers():
    # The scalar formula's windowed branch is exercised below only if one of NAMES has it.
    assert any(m._sliding_layers for m in MODELS.values())


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(NAMES), st.integers(1, 1024), st.integers(0, 10_000_000),
       st.integers(1, roofline._SCALAR_STEPS + 8))
def test_decode_steps_list_equals_numpy_and_single_passes(name, decodes, context, count):
    model = MODELS[name]
    listed = model.decode_steps_list(decodes, context, count)
    assert all(type(ns) is int for ns in listed)
    assert listed == model.decode_steps_ns(decodes, context, count).tolist()
    fresh = _model(name)   # no memo yet: the uncached path
    for i, ns in enumerate(listed):
        shape = PassShape(num_decodes=decodes, decode_tokens=decodes, decode_context=context + i * decodes)
        assert ns == fresh.duration_ns(shape)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(NAMES), st.integers(1, 2048), st.floats(0, 1e8, allow_nan=False),
       st.one_of(st.none(), st.integers(1, 8192)))
def test_scalar_attention_equals_general(name, decodes, context, queries):
    model = MODELS[name]
    assert model._decode_attention_scalar(decodes, context, queries) == \
        model._decode_attention_seconds(decodes, context, queries)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(NAMES), st.integers(1, 16384), st.integers(1, 1024),
       st.one_of(st.none(), st.integers(1, 4096)))
def test_fixed_seconds_memo_is_the_formula(name, tokens, requests, logits):
    model = MODELS[name]
    first = model._fixed_seconds(tokens, requests, logits)
    assert (tokens, requests, logits) in model._fixed_memo   # the memo was filled...
    assert model._fixed_seconds(tokens, requests, logits) == first   # ...and read back
    assert first == model._fixed_seconds_uncached(tokens, requests, logits)


def test_fixed_memo_starts_afresh_when_full(monkeypatch):
    monkeypatch.setattr(roofline, "_FIXED_MEMO_SIZE", 4)
    model = _model("llama-3.1-8b")
    for tokens in range(1, 10):
        assert model._fixed_seconds(tokens, tokens) == model._fixed_seconds_uncached(tokens, tokens, None)
        assert len(model._fixed_memo) <= 4


@pytest.mark.parametrize("name", NAMES)
def test_mixed_pass_durations_unchanged_by_the_memo(name):
    memoised, fresh = MODELS[name], _model(name)
    shapes = [PassShape([(512, 0)], 8, 8, 8 * 900), PassShape([(7, 1000), (300, 0)], 0, 0, 0),
              PassShape([], 64, 64, 64 * 3000), PassShape([], 64, 192, 64 * 3000)]
    for shape in shapes * 2:   # the second time round reads the memo
        assert memoised.duration_ns(shape) == _model(name).duration_ns(shape) == fresh.duration_ns(shape)
