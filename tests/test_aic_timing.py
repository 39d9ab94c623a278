"""engine.timing.kind aic: step times from aiconfigurator-core's kernel database (extra servesim[aic]).

The missing-package error always runs; the rest needs aiconfigurator-core installed and skips
without it (CI does not install it).
"""

from __future__ import annotations

import builtins

import pytest

import servesim
from servesim.config import AicTiming
from servesim.errors import ServesimError
from servesim.hardware import resolve_gpu
from servesim.hardware.deployment import Deployment
from servesim.models import resolve_model
from servesim.timing.base import PassShape, build_timing_model
from servesim.timing.roofline import RooflineTimingModel, fitted_profile


def deployment(name="llama-3.1-8b", gpu="h200-sxm", precision="bf16", kv="bf16", tp=1, ep=1):
    return Deployment(resolve_model(name).arch, resolve_gpu(gpu), precision, kv, tp=tp, ep=ep)


def test_missing_package_names_the_extra(monkeypatch):
    real_import = builtins.__import__

    def no_aic(name, *args, **kwargs):
        if name == "aiconfigurator_core" or name.startswith("aiconfigurator_core."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_aic)
    with pytest.raises(ServesimError, match=r"^engine\.timing\.kind aic needs aiconfigurator-core: install it "
                                            r"with pip install 'servesim\[aic\]'$"):
        build_timing_model(AicTiming(kind="aic"), deployment(), "vllm")


# --------------------------------------------------------------------------- with aiconfigurator-core


@pytest.fixture(scope="module")
def aic():
    pytest.importorskip("aiconfigurator_core")
    from servesim.timing.aic import AicTimingModel

    return AicTimingModel


@pytest.fixture(scope="module")
def llama(aic):
    return aic(AicTiming(kind="aic"), deployment(), "vllm")


def test_llama_h200_vllm_run_completes(aic):
    result = servesim.simulate(overrides=[("gpu", "h200-sxm"), ("engine.timing", {"kind": "aic"}),
                                          ("workload.max_requests", 60)])
    s = result.summary
    assert s["completed"] == 60
    assert 0 < s["mean_ttft_ms"] < 1000
    assert 2 < s["mean_tpot_ms"] < 50


def test_defaults_to_the_current_database_version(llama):
    from aiconfigurator_core.sdk import perf_database

    assert (llama.system, llama.backend) == ("h200_sxm", "vllm")
    assert llama.version == perf_database.get_version_slots("h200_sxm", "vllm")["current"]


def test_a_gemm_lookup_reproduced_by_hand(llama):
    # aiconfigurator-core 0.12.0, systems/data/h200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet, the
    # bfloat16 row m=4096 n=6144 k=4096 (Llama-3.1-8B's QKV projection at 4,096 tokens): 0.248216 ms.
    import aiconfigurator_core.sdk.operations as ops
    from aiconfigurator_core.sdk import common
    from aiconfigurator_core.sdk.engine import build_ops_json

    if llama.version != "0.24.0":
        pytest.skip("the hand-read row is from the 0.24.0 table")
    qkv = build_ops_json([ops.GEMM("qkv", 1, (32 + 2 * 8) * 128, 4096, common.GEMMQuantMode.bfloat16)])
    ms = llama._evaluate(qkv, "qkv", is_context=True, batch_size=1, s=4096, x=4096)
    assert ms == pytest.approx(0.248216, rel=1e-3)


def test_more_tokens_never_take_less_time(llama):
    for prefix in (0, 1000, 30000):
        times = [llama.duration_ns(PassShape(prefill_chunks=[(t, prefix)]))
                 for t in [*range(1, 300), *range(300, 16384, 97)]]
        assert times == sorted(times)
    for context in (10, 3000, 20000):
        times = [llama.duration_ns(PassShape(num_decodes=b, decode_tokens=b, decode_context=b * context))
                 for b in range(1, 1100, 3)]
        assert times == sorted(times)
    for batch in (1, 64, 300):
        times = [llama.duration_ns(PassShape(num_decodes=batch, decode_tokens=batch, decode_context=batch * c))
                 for c in range(1, 40000, 53)]
        assert times == sorted(times)
    base = PassShape(prefill_chunks=[(512, 100)], num_decodes=40, decode_tokens=40, decode_context=40 * 2000)
    more = PassShape(prefill_chunks=[(512, 100), (64, 0)], num_decodes=48, decode_tokens=48,
                     decode_context=48 * 2000)
    assert llama.duration_ns(more) > llama.duration_ns(base)


def test_decode_at_batch_one_is_of_the_roofline_order(llama):
    d = deployment()
    roofline = RooflineTimingModel(d, fitted_profile("h200-sxm", "vllm")[0])
    shape = PassShape(num_decodes=1, decode_tokens=1, decode_context=1000)
    ratio = llama.duration_ns(shape) / roofline.duration_ns(shape)
    assert 1 / 3 < ratio < 3


def test_deterministic_and_vectorised_decode_equals_single_passes(aic, llama):
    shapes = [PassShape(prefill_chunks=[(777, 4096)], num_decodes=13, decode_tokens=13, decode_context=13 * 901),
              PassShape(num_decodes=200, decode_tokens=200, decode_context=200 * 3333)]
    first = [llama.duration_ns(s) for s in shapes]
    again = aic(AicTiming(kind="aic"), deployment(), "vllm")
    assert [again.duration_ns(s) for s in shapes] == first == [llama.duration_ns(s) for s in shapes]
    steps = llama.decode_steps_ns(37, 37 * 1500, 50)
    for i, ns in enumerate(steps.tolist()):
        assert ns == llama.duration_ns(PassShape(num_decodes=37, decode_tokens=37, decode_context=37 * 1500 + i * 37))


def test_tensor_parallel_and_moe_deployments_are_priced(aic):
    tp = aic(AicTiming(kind="aic"), deployment("llama-3.1-70b", "h100-sxm", "fp8", "fp8", tp=4), "sglang")
    moe = aic(AicTiming(kind="aic"), deployment("mixtral-8x7b", tp=2, ep=2), "trtllm")
    for model in (tp, moe):
        decode = model.duration_ns(PassShape(num_decodes=8, decode_tokens=8, decode_context=8 * 1000))
        prefill = model.duration_ns(PassShape(prefill_chunks=[(4096, 0)]))
        assert 1e6 < decode < prefill < 1e9


def test_unsupported_combinations_say_what_is_available(aic):
    with pytest.raises(ServesimError, match=r"no h200_sxm/vllm database version '9\.9'; it serves 0\.24\.0 "
                                            r"\(current\)"):
        aic(AicTiming(kind="aic", version="9.9"), deployment(), "vllm")
    with pytest.raises(ServesimError, match="prices GQA/MHA attention only and deepseek-v3 has multi-head latent"):
        aic(AicTiming(kind="aic"), deployment("deepseek-v3", tp=8, ep=8, precision="fp8"), "vllm")
    with pytest.raises(ServesimError, match="cannot price per-token work.*available"):
        aic(AicTiming(kind="aic"), deployment(precision="int4"), "vllm")
