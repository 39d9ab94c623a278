"""Catalogues, KV capacity and the roofline step-time model, on figures checked by hand."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.errors import ServesimError
from servesim.hardware import resolve_gpu
from servesim.hardware.deployment import GIB, RUNTIME_RESERVE_GIB, Deployment
from servesim.models import resolve_model
from servesim.timing.base import PassShape
from servesim.timing.roofline import RooflineProfile, RooflineTimingModel

# No overheads and flat GEMM efficiency, so the hand arithmetic below is the whole story.
BARE = RooflineProfile(gemm_efficiency=0.8, gemm_half_tokens=1e-9, memory_efficiency=0.8,
                       attention_efficiency=0.5, comm_efficiency=1.0, comm_latency_us=0.0,
                       pass_overhead_ms=0.0, per_layer_overhead_us=0.0, per_request_ms=0.0)


def arch(name):
    return resolve_model(name).arch


@pytest.mark.parametrize("name,total,active", [
    ("llama-3.1-8b", 8.03, 8.03),
    ("llama-3.1-70b", 70.55, 70.55),
    ("llama-3.1-405b", 405.85, 405.85),
    ("qwen3-235b-a22b", 235.09, 22.19),
    ("deepseek-v3", 671.03, 37.55),
    ("mixtral-8x7b", 46.70, 12.88),
    ("gpt-oss-120b", 116.79, 5.71),   # OpenAI's 5.1 B active excludes the input embedding (0.58 B)
])
def test_parameter_counts(name, total, active):
    a = arch(name)
    assert a.total_params() / 1e9 == pytest.approx(total, abs=0.01)
    assert a.active_params() / 1e9 == pytest.approx(active, abs=0.01)


def test_kv_bytes_per_token():
    # Llama-3.1-70B: 80 layers × 2 (K and V) × 8 KV heads × 128 dims × 2 bytes = 327,680 = 320 KiB.
    assert arch("llama-3.1-70b").kv_bytes_per_token(2) == 320 * 1024
    # DeepSeek-V3's latent cache: 61 layers × (512 + 64) × 2 bytes = 70,272.
    assert arch("deepseek-v3").kv_bytes_per_token(2) == 61 * 576 * 2


def test_names_and_hf_ids():
    assert resolve_model("meta-llama/Llama-3.1-70B").name == "llama-3.1-70b"
    assert resolve_model("Qwen/Qwen3-32B").name == "qwen3-32b"
    assert resolve_model("QWEN/QWEN3-235B-A22B-FP8").name == "qwen3-235b-a22b"
    assert resolve_gpu("h100_sxm").name == "h100-sxm"
    assert resolve_gpu("b200_sxm").name == "b200"
    with pytest.raises(ServesimError, match="did you mean llama-3.1-70b"):
        resolve_model("llama-3.1-7b")
    with pytest.raises(ServesimError, match="unknown GPU 'h300'.*did you mean"):
        resolve_gpu("h300")


def test_config_json_path(tmp_path):
    import json

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8,
                                "num_key_value_heads": 2, "intermediate_size": 4096, "vocab_size": 1000,
                                "max_position_embeddings": 2048}))
    spec = resolve_model(str(path))
    # 4 layers × (1024×(8+4)×128 + 1024×1024 + 3×1024×4096) + 2 × 1000×1024.
    per_layer = 1024 * 12 * 128 + 1024 * 1024 + 3 * 1024 * 4096
    assert spec.arch.total_params() == 4 * per_layer + 2 * 1000 * 1024
    assert spec.context_length == 2048


def test_kv_capacity_by_hand():
    d = Deployment(arch("llama-3.1-8b"), resolve_gpu("h100-sxm"), "bf16", "bf16")
    # 79.2 GiB × 0.9 = 71.28 GiB; weights 8,029,995,008 × 2 bytes; runtime reserve 1.75 GiB;
    # activations 8192 × (2×14336 + 4×4096) × 2 + 1024 × 128256 × 4 bytes;
    # one block = 16 tokens × 131,072 bytes.
    budget = (79.2 * 0.9 - RUNTIME_RESERVE_GIB) * GIB - 8_029_995_008 * 2 - (
        8192 * (2 * 14336 + 4 * 4096) * 2 + 1024 * 128256 * 4)
    expected = int(budget // (16 * 131072))
    assert d.num_gpu_blocks(16, 0.9, 8192, 1024) == expected
    assert 27_000 < expected < 27_500   # vLLM reports about 27,000 for this deployment


def test_model_too_big_says_by_how_much():
    d = Deployment(arch("llama-3.1-70b"), resolve_gpu("h100-sxm"), "bf16", "bf16", tp=1)
    # 70.55e9 × 2 bytes = 131.4 GiB of weights, 52.2 GiB more than the whole 79.2 GiB GPU.
    with pytest.raises(ServesimError, match=r"weights alone take 131.4 GiB per GPU, 52.2 GiB more than the 79.2 GiB "
                                            r"of one h100-sxm; raise tp"):
        d.num_gpu_blocks(16, 0.9, 8192, 1024)
    Deployment(arch("llama-3.1-70b"), resolve_gpu("h100-sxm"), "bf16", "bf16", tp=4).num_gpu_blocks(
        16, 0.9, 8192, 1024)


def test_ep_must_divide_the_workers_gpus():
    with pytest.raises(ServesimError, match="ep 3 must divide"):
        Deployment(arch("deepseek-v3"), resolve_gpu("h200-sxm"), "fp8", "fp8", tp=8, ep=3)


def test_decode_at_batch_one_is_memory_bound():
    d = Deployment(arch("llama-3.1-70b"), resolve_gpu("h100-sxm"), "bf16", "bf16", tp=1)
    model = RooflineTimingModel(d, BARE)
    ns = model.duration_ns(PassShape(num_decodes=1, decode_tokens=1, decode_context=100))
    # Every weight but the input embedding (whose rows are looked up, not streamed):
    # (70,553,706,496 − 128,256 × 8,192) × 2 bytes at 3.35 TB/s × 0.8; KV reads and FLOPs are tiny.
    weights_s = (70_553_706_496 - 128256 * 8192) * 2 / (3.35e12 * 0.8)
    assert ns / 1e9 == pytest.approx(weights_s, rel=0.01)


def test_large_prefill_is_compute_bound():
    d = Deployment(arch("llama-3.1-8b"), resolve_gpu("h100-sxm"), "bf16", "bf16")
    model = RooflineTimingModel(d, BARE)
    ns = model.duration_ns(PassShape(prefill_chunks=[(8192, 0)]))
    # GEMMs: 2 × 7.50e9 non-embedding weights... (embedding lookups are not GEMMs; the LM head
    # runs once) × 8192 tokens at 989 TFLOPS × 0.8, plus causal attention at 50%:
    # 32 layers × 4 × 32 heads × 128 × (8192 × 8193 / 2) pairs.
    dense_params = 8_029_995_008 - 2 * 128256 * 4096
    gemm_s = 2 * dense_params * 8192 / (989e12 * 0.8)
    attention_s = 32 * 4 * 32 * 128 * (8192 * 8193 / 2) / (989e12 * 0.5)
    head_s = 2 * 128256 * 4096 / (989e12 * 0.8)
    assert ns / 1e9 == pytest.approx(gemm_s + attention_s + head_s, rel=0.01)


SHAPES = st.builds(
    lambda chunks, decodes, ctx: PassShape(prefill_chunks=chunks, num_decodes=decodes, decode_tokens=decodes,
                                           decode_context=decodes * ctx),
    st.lists(st.tuples(st.integers(1, 4096), st.integers(0, 8192)), max_size=3),
    st.integers(0, 256), st.integers(1, 8192),
)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["llama-3.1-70b", "qwen3-235b-a22b", "deepseek-v3", "gpt-oss-120b"]), SHAPES,
       st.integers(1, 512), st.integers(1, 4096))
def test_more_work_never_takes_less_time(name, shape, extra_decodes, extra_chunk):
    d = Deployment(arch(name), resolve_gpu("h200-sxm"), "fp8", "fp8", tp=8, ep=8 if arch(name).experts else 1)
    model = RooflineTimingModel(d, RooflineProfile())
    base = model.duration_ns(shape)
    more_decodes = PassShape(list(shape.prefill_chunks), shape.num_decodes + extra_decodes,
                             shape.decode_tokens + extra_decodes, shape.decode_context + extra_decodes * 100)
    longer = PassShape(shape.prefill_chunks + [(extra_chunk, 0)], shape.num_decodes, shape.decode_tokens,
                       shape.decode_context)
    assert model.duration_ns(more_decodes) >= base
    assert model.duration_ns(longer) >= base


@pytest.mark.parametrize("name", ["llama-3.1-8b", "gpt-oss-120b", "deepseek-v3"])
def test_vectorised_decode_steps_equal_single_passes(name):
    a = arch(name)
    d = Deployment(a, resolve_gpu("b200"), "fp8", "fp8", tp=4, ep=4 if a.experts else 1)
    model = RooflineTimingModel(d, RooflineProfile())
    steps = model.decode_steps_ns(37, 37 * 1500, 50)
    for i, ns in enumerate(steps.tolist()):
        shape = PassShape(num_decodes=37, decode_tokens=37, decode_context=37 * 1500 + i * 37)
        assert ns == model.duration_ns(shape)


def test_collectives_follow_the_nvlink_domain():
    # H100: NVLink 900 GB/s (450 one way), NIC 50 GB/s, 8 GPUs per domain; comm efficiency 1.
    model = RooflineTimingModel(Deployment(arch("llama-3.1-8b"), resolve_gpu("h100-sxm"), "bf16", "bf16", tp=8),
                                BARE)
    size = 1.6e8   # bytes per GPU
    # 8 ranks: a ring over NVLink, 2·7/8 · 1.6e8 / 4.5e11 = 0.6222 ms.
    assert model._all_reduce_seconds(size, 8) == pytest.approx(2 * 7 / 8 * size / 4.5e11)
    # 16 ranks on 2 domains: the same ring inside each (0.6222 ms), then each GPU's 1/8 share
    # (2e7 bytes) all-reduced across the 2 domains over its NIC: 2·1/2 · 2e7 / 5e10 = 0.4 ms.
    assert model._all_reduce_seconds(size, 16) == pytest.approx(2 * 7 / 8 * size / 4.5e11 + 2e7 / 5e10)
    # All-to-all over 16 ranks: 8 of the 15 peers are in the other domain. 1.5e8 bytes sent:
    # 8e7 over the NIC (1.6 ms) while 7e7 take NVLink (0.156 ms).
    assert model._all_to_all_seconds(1.5e8, 16) == pytest.approx(8e7 / 5e10)
    assert model._all_to_all_seconds(1.5e8, 8) == pytest.approx(1.5e8 / 4.5e11)


def test_expert_parallelism_pays_all_to_all_only_with_attention_dp():
    # DeepSeek-V3 (61 layers, 58 MoE, hidden 7168, k = 8) on H200 (NVLink 450 GB/s one way),
    # comm efficiency 1, no latency; 64 tokens in the pass.
    gpu = resolve_gpu("h200-sxm")
    a = arch("deepseek-v3")

    def comm(**parallel):
        return RooflineTimingModel(Deployment(a, gpu, "fp8", "fp8", **parallel), BARE)._comm_seconds

    # TP 8 attention with EP 8: every rank holds all 64 tokens and runs its experts on them; the
    # combine is the MLP all-reduce, so the collectives are TP's alone, EP or not:
    # 2 · 61 · 2·7/8 · (64 · 7168 · 2 B) / 4.5e11 B/s.
    tp_all_reduces = 2 * 61 * 2 * 7 / 8 * 64 * 7168 * 2 / 4.5e11
    assert comm(tp=8, ep=8)(64) == pytest.approx(tp_all_reduces)
    assert comm(tp=8, ep=8)(64) == comm(tp=8)(64)
    # Attention-DP 8 (TP 1), EP 8: each rank holds 8 of the tokens and sends their k = 8 copies,
    # 7/8 of them to other ranks, both ways, per MoE layer: 58 · 2 · (7/8 · 8 · 8 · 7168 · 2 B) / 4.5e11.
    assert comm(tp=1, attention_dp=8, ep=8)(64 / 8) == pytest.approx(58 * 2 * 7 / 8 * 8 * 8 * 7168 * 2 / 4.5e11)


def test_tp_inside_a_domain_uses_nvlink_even_when_the_worker_spans_more():
    # TP 4 × attention-DP 4 = 16 GPUs: the all-reduces span 4 GPUs of one domain (NVLink),
    # not the 16 of the worker, so the pass is as fast as TP 4 alone (the dense work per GPU
    # is the same: DP ranks run their own requests).
    gpu = resolve_gpu("h100-sxm")
    shape = PassShape(num_decodes=64, decode_tokens=64, decode_context=64 * 1000)
    alone = RooflineTimingModel(Deployment(arch("llama-3.1-70b"), gpu, "bf16", "bf16", tp=4), BARE)
    wide = RooflineTimingModel(Deployment(arch("llama-3.1-70b"), gpu, "bf16", "bf16", tp=4, attention_dp=4), BARE)
    quarter = PassShape(num_decodes=16, decode_tokens=16, decode_context=16 * 1000)
    assert wide.duration_ns(shape) == alone.duration_ns(quarter)


def test_expert_efficiency_prices_compute_bound_experts():
    # Qwen3-235B (94 MoE layers, 128 experts, 8 a token) on 8 H100s, fp8, BARE profile. An
    # 8,192-token prefill puts 8192 × 8 / 128 = 512 rows on each expert: compute-bound, so
    # halving the experts' efficiency doubles their part and leaves the rest; a one-token
    # decode reads the weights of the 8 experts it touches: memory-bound, and unchanged.
    d = Deployment(arch("qwen3-235b-a22b"), resolve_gpu("h100-sxm"), "fp8", "fp8", tp=8)
    full = RooflineTimingModel(d, BARE)
    half = RooflineTimingModel(d, RooflineProfile(**{**BARE.__dict__, "expert_efficiency": 0.5}))
    prefill = PassShape(prefill_chunks=[(8192, 0)])
    experts_s = full._expert_flops_per_token * 8192 / full._peak_expert
    assert (half.duration_ns(prefill) - full.duration_ns(prefill)) / 1e9 == pytest.approx(experts_s, rel=1e-6)
    decode = PassShape(num_decodes=1, decode_tokens=1, decode_context=100)
    assert half.duration_ns(decode) == full.duration_ns(decode)


def test_eager_prefill_pays_the_moe_layers_host_time():
    # 94 MoE layers × 500 µs = 47 ms on every pass with prefill work, on an engine that runs
    # prefill outside CUDA graphs; nothing on decode-only passes, nothing on dense models,
    # nothing where prefill runs inside graphs.
    profile = RooflineProfile(**{**BARE.__dict__, "eager_moe_layer_us": 500.0})
    d = Deployment(arch("qwen3-235b-a22b"), resolve_gpu("h100-sxm"), "fp8", "fp8", tp=8)
    eager, graphed = RooflineTimingModel(d, profile, graph_tokens=0), RooflineTimingModel(d, profile)
    mixed = PassShape(prefill_chunks=[(1024, 0)], num_decodes=3, decode_tokens=3, decode_context=3000)
    assert eager.duration_ns(mixed) - graphed.duration_ns(mixed) == 47_000_000
    # vLLM replays passes up to its capture size from (piecewise) graphs: 1,027 tokens fit 1,027.
    captured = RooflineTimingModel(d, profile, graph_tokens=1027)
    assert captured.duration_ns(mixed) == graphed.duration_ns(mixed)
    assert RooflineTimingModel(d, profile, graph_tokens=1026).duration_ns(mixed) == eager.duration_ns(mixed)
    decode = PassShape(num_decodes=3, decode_tokens=3, decode_context=3000)
    assert eager.duration_ns(decode) == graphed.duration_ns(decode)
    dense = Deployment(arch("llama-3.1-70b"), resolve_gpu("h100-sxm"), "fp8", "fp8", tp=8)
    assert (RooflineTimingModel(dense, profile, graph_tokens=0).duration_ns(mixed)
            == RooflineTimingModel(dense, profile).duration_ns(mixed))


def test_which_passes_run_eagerly():
    import servesim

    # vLLM: min(max_num_seqs 4 × 2, 512, budget) = 8 tokens replayed from graphs; the others none.
    result = servesim.simulate(overrides=[("workload.max_requests", 1),
                                          ("engine.workers.aggregated.scheduler.max_num_seqs", 4)])
    assert result.config.engine.workers.aggregated.scheduler.max_cudagraph_capture_size == 8
    from servesim.engine.registry import BACKENDS

    assert BACKENDS["sglang"].prefill_graph_tokens(None) == BACKENDS["trtllm"].prefill_graph_tokens(None) == 0
