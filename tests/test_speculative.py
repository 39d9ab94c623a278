"""Speculative decoding: verification of 1 + k tokens, seeded acceptance, rollback, timing."""

from __future__ import annotations

import math

import pytest

import servesim
from servesim.config import SpeculativeConfig
from servesim.engine.speculative import Speculation
from servesim.errors import ServesimError
from servesim.hardware import resolve_gpu
from servesim.hardware.deployment import Deployment
from servesim.models import resolve_model
from servesim.timing.base import PassShape
from servesim.timing.roofline import RooflineProfile, RooflineTimingModel

from tests.support.runs import run_backend

VLLM = {"num_gpu_blocks": 4000, "max_model_len": 2048, "async_scheduling": False, "block_size": 4}


def spec(k=3, rate=0.6, method="eagle"):
    return {"speculative": {"method": method, "num_speculative_tokens": k, "acceptance_rate": rate}}


def _moments(rates):
    """Mean and variance of accepted + 1 when P(accepted >= i) = rates[i-1]."""
    tail = [1.0] + list(rates) + [0.0]
    probs = [tail[i] - tail[i + 1] for i in range(len(rates) + 1)]     # P(accepted = i)
    mean = sum((i + 1) * p for i, p in enumerate(probs))
    var = sum((i + 1) ** 2 * p for i, p in enumerate(probs)) - mean ** 2
    return mean, var


@pytest.mark.parametrize("backend,scheduler", [
    ("vllm", VLLM),
    ("sglang", {"max_total_tokens": 200_000, "context_length": 2048, "disable_overlap_schedule": True}),
    ("trtllm", {"max_tokens": 200_000, "max_seq_len": 2048, "disable_overlap_scheduler": True}),
])
@pytest.mark.parametrize("rate", [0.6, [0.9, 0.5, 0.2]])
def test_acceptance_length_matches_the_closed_form(tmp_path, backend, scheduler, rate):
    # 48 requests × 600 tokens: about 28,800 / 2.6 ≈ 11,000 verifications (at least 10,000).
    rows = [{"timestamp": 0, "input_length": 16, "output_length": 600} for _ in range(48)]
    run = run_backend(tmp_path, rows, backend, scheduler, role=spec(3, rate))
    verifications = sum(1 for p in run.passes for tokens in p["scheduled"].values() if tokens == 4)
    assert verifications >= 10_000
    rates = rate if isinstance(rate, list) else [rate ** i for i in (1, 2, 3)]
    mean, var = _moments(rates)
    # Constant 0.6: (1 - 0.6^4) / (1 - 0.6) = 2.176; per position [0.9, 0.5, 0.2]: 1 + 1.6 = 2.6.
    assert mean == pytest.approx((1 - 0.6 ** 4) / 0.4 if rate == 0.6 else 2.6)
    measured = run.result.summary["mean_acceptance_length"]
    assert abs(measured - mean) < 4 * math.sqrt(var / verifications)
    assert all(r.output_length == 600 for r in run.result.requests)


def test_one_request_step_by_step(tmp_path):
    # k = 2, block size 4, 10 ms passes, one request of prompt 6 and 12 output tokens.
    # Pass 0 prefills 6 tokens and samples token 1. Every later pass verifies its newest token
    # plus 2 drafts (3 tokens) and delivers accepted + 1, each draw a hash of (seed, request,
    # verification number); rejected positions are computed again next pass.
    rows = [{"timestamp": 0, "input_length": 6, "output_length": 12}]
    run = run_backend(tmp_path, rows, "vllm", VLLM, role=spec(2, 0.7))
    speculation = Speculation(SpeculativeConfig(method="eagle", num_speculative_tokens=2, acceptance_rate=0.7), 0)
    produced, step, computed, passes = 1, 0, 6, [{0: 6}]
    while produced < 12:
        step += 1
        passes.append({0: 3})
        accepted = speculation.accepted(0, step, 2)
        computed += 1 + accepted       # 3 computed, 2 - accepted rolled back
        produced += accepted + 1
    assert run.schedule() == passes
    assert run.ms(0, "finish") == 10.0 * len(passes)
    assert run.by_id[0].output_length == 12   # the last verification's surplus is cut


def test_drafts_reserve_kv_blocks(tmp_path):
    # Prompt 3, block size 4, 10 usable blocks. The first decode computes position 3 without
    # drafts, positions 3..6 with 3 drafts.
    rows = [{"timestamp": 0, "input_length": 3, "output_length": 3}]
    sched = {**VLLM, "num_gpu_blocks": 11, "max_model_len": 32}
    plain = run_backend(tmp_path, rows, "vllm", sched)
    ngram = run_backend(tmp_path, rows, "vllm", sched, role=spec(3, 0.0, method="ngram"))
    eagle = run_backend(tmp_path, rows, "vllm", sched, role=spec(3, 0.0))
    # Plain: 1 block for the prompt, still 1 after the first decode (positions 0..3).
    assert [p["free_blocks"] for p in plain.passes][:2] == [9, 9]
    # N-gram drafts: positions 0..6 after the first decode: 2 blocks.
    assert [p["free_blocks"] for p in ngram.passes][:2] == [9, 8]
    # EAGLE also reserves 3 lookahead slots past the scheduled positions (vLLM's
    # num_lookahead_tokens, for the drafter's own KV): the prefill takes slots 0..5 (2 blocks),
    # the first decode slots 0..9 (3 blocks).
    assert [p["free_blocks"] for p in eagle.passes][:2] == [8, 7]


def test_eagle_lookahead_gates_admission(tmp_path):
    # 4 usable blocks of 4; every draft rejected (one token per verification).
    rows = [{"timestamp": 0, "input_length": 4, "output_length": 4},
            {"timestamp": 0.5, "input_length": 4, "output_length": 1}]
    sched = {**VLLM, "num_gpu_blocks": 5, "max_model_len": 16}
    # N-gram (no lookahead): R0's prefill takes 1 block; at 10 its verification of 1 + 2
    # positions takes a 2nd, and R1's 4-token prompt (1 block) is admitted beside it: TTFT
    # 20 - 0.5 = 19.5 ms.
    ngram = run_backend(tmp_path, rows, "vllm", sched, role=spec(2, 0.0, method="ngram"))
    assert ngram.ttft_ms(1) == 19.5
    # EAGLE adds 2 lookahead slots: R0 holds slots 0..5 (2 blocks), then 0..8 (3 blocks) from
    # 10. R1's whole prompt (1 block) would fit, but its allocation with lookahead (slots 0..5,
    # 2 blocks) does not: it waits until R0 finishes at 40 and runs [40,50): TTFT 49.5 ms.
    eagle = run_backend(tmp_path, rows, "vllm", sched, role=spec(2, 0.0))
    assert [p["free_blocks"] for p in eagle.passes][:2] == [2, 1]
    assert eagle.by_id[0].finish_ns == 40_000_000
    assert eagle.ttft_ms(1) == 49.5


def test_async_scheduling_with_drafts_keeps_every_token(tmp_path):
    rows = [{"timestamp": t, "input_length": 30, "output_length": 50} for t in range(0, 200, 7)]
    sync = run_backend(tmp_path, rows, "vllm", VLLM, role=spec(3, 0.8))
    async_ = run_backend(tmp_path, rows, "vllm", {**VLLM, "async_scheduling": True}, role=spec(3, 0.8))
    for run in (sync, async_):
        assert all(r.output_length == 50 for r in run.result.requests)
    # The same requests verify with the same draws: acceptance does not depend on scheduling.
    assert sync.result.summary["mean_acceptance_length"] > 2.5


def test_acceptance_is_common_to_deployments(tmp_path):
    # A request's draws depend on (seed, request, verification), not on its batch: a change
    # of max_num_seqs changes timing but not how many tokens each verification accepted.
    rows = [{"timestamp": 0, "input_length": 10, "output_length": 40} for _ in range(8)]
    wide = run_backend(tmp_path, rows, "vllm", {**VLLM, "max_num_seqs": 8}, role=spec(3, 0.5))
    narrow = run_backend(tmp_path, rows, "vllm", {**VLLM, "max_num_seqs": 2}, role=spec(3, 0.5))
    assert wide.result.summary["mean_acceptance_length"] == narrow.result.summary["mean_acceptance_length"]


def test_speculation_at_zero_and_full_acceptance():
    cfg = SpeculativeConfig(method="ngram", num_speculative_tokens=4, acceptance_rate=0.0)
    assert {Speculation(cfg, 1).accepted(7, s, 4) for s in range(1, 200)} == {0}
    cfg = SpeculativeConfig(method="ngram", num_speculative_tokens=4, acceptance_rate=1.0)
    assert {Speculation(cfg, 1).accepted(7, s, 4) for s in range(1, 200)} == {4}
    # Fewer drafts scheduled (a token budget cut them) cap the count.
    assert Speculation(cfg, 1).accepted(7, 1, 2) == 2


def test_rates_must_not_increase_with_position():
    with pytest.raises(ValueError, match="must not increase"):
        SpeculativeConfig(method="eagle", num_speculative_tokens=2, acceptance_rate=[0.5, 0.8])
    with pytest.raises(ServesimError, match="per-position rates but num_speculative_tokens is 3"):
        servesim.simulate(overrides=[("engine.workers.aggregated.speculative",
                                      {"method": "eagle", "num_speculative_tokens": 3, "acceptance_rate": [0.5]})])


def test_roofline_prices_verification_and_the_drafter():
    dep = Deployment(resolve_model("llama-3.1-8b").arch, resolve_gpu("h100-sxm"), "bf16", "bf16")
    profile = RooflineProfile()
    eagle = RooflineTimingModel(dep, profile, SpeculativeConfig(method="eagle", num_speculative_tokens=3,
                                                                 acceptance_rate=0.7))
    ngram = RooflineTimingModel(dep, profile, SpeculativeConfig(method="ngram", num_speculative_tokens=3,
                                                                 acceptance_rate=0.7))
    plain = RooflineTimingModel(dep, profile)
    one = PassShape(num_decodes=64, decode_tokens=64, decode_context=64 * 2000)
    four = PassShape(num_decodes=64, decode_tokens=256, decode_context=64 * 2003)
    # Verifying 4 tokens costs more than decoding 1; n-gram drafting is free; EAGLE's 3 draft
    # steps each cost about one layer plus the LM head (1/32 of the body + head, × 3).
    assert ngram.duration_ns(four) > plain.duration_ns(one)
    assert ngram.duration_ns(four) == plain.duration_ns(four)
    extra = eagle.duration_ns(four) - ngram.duration_ns(four)
    assert 0 < extra < 0.5 * plain.duration_ns(one)
    # Without drafts in the pass there is nothing to draft for.
    assert eagle.duration_ns(one) == plain.duration_ns(one)
