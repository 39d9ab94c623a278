"""SGLang's defaults for every null in its scheduler config (sglang 0.5.9's server_args.py)."""

from __future__ import annotations

from servesim.engine.sglang.config import SglangSchedulerConfig
from servesim.errors import ServesimError
from servesim.hardware import GpuSpec
from servesim.hardware.deployment import GIB, Deployment, gib
from servesim.hardware.memory import check_context_fits, check_pinned_tokens
from servesim.models import ModelSpec


def resolve_sglang(sched: SglangSchedulerConfig, where: str, gpu: GpuSpec, model: ModelSpec,
                    deployment: Deployment, speculative: bool, role: str) -> SglangSchedulerConfig:
    """SGLang 0.5.9's server-argument defaults (server_args.py, model_runner.py)."""
    memory_gb = gpu.memory_gib * GIB / 1e9
    chunk = sched.chunked_prefill_size
    if chunk is None:
        chunk = 4096 if memory_gb < 60 else 8192 if memory_gb < 160 else 16384
    fraction = sched.mem_fraction_static
    if fraction is None:
        # reserved MB = 512 + max(chunk, 2048) × 1.5 + cuda_graph_max_bs × 2 + tp/8 × 1024,
        # at least 10240 MB on GPUs over 60 GB.
        graph_bs = 512 if memory_gb >= 160 else (256 if deployment.tp < 4 else 512)
        # Without chunking the activation reserve follows max_prefill_tokens.
        prefill_tokens = chunk if chunk > 0 else sched.max_prefill_tokens
        reserved = 512 + max(prefill_tokens, 2048) * 1.5 + graph_bs * 2 + deployment.tp / 8 * 1024
        if memory_gb > 60:
            reserved = max(reserved, 10240)
        total_mb = gpu.memory_gib * 1024
        fraction = round((total_mb - reserved) / total_mb, 3)
    context = sched.context_length or model.context_length
    # model_runner.py: the pool is what mem_fraction_static leaves after the weights.
    deployment.check_weights_fit()
    budget = gpu.memory_gib * GIB * fraction
    rest = budget - deployment.weight_bytes_per_gpu()
    spent = (f"weights ({gib(deployment.weight_bytes_per_gpu())}) within mem_fraction_static {fraction} "
             f"({gib(budget)})")
    profiled = int(max(rest, 0) // deployment.kv_bytes_per_token_per_gpu()) * deployment.attention_dp
    if profiled < sched.page_size:
        raise ServesimError(f"{where}: {deployment.placement} leaves no room for a KV cache: "
                            f"{gib(max(rest, 0))} is left after {spent}; raise tp or mem_fraction_static")
    profiled -= profiled % sched.page_size
    tokens = sched.max_total_tokens
    if tokens is None:
        tokens = profiled
    else:
        check_pinned_tokens(where, "max_total_tokens", deployment, tokens, rest, spent, "SGLang", profiled)
    check_context_fits(where, context, tokens, "max_total_tokens")
    running = sched.max_running_requests
    if running is None:
        running = 48 if speculative else min(tokens // 2, min(max(int(tokens / context * 512), 2048), 4096))
    overlap_off = sched.disable_overlap_schedule
    if overlap_off is None:
        # SGLang 0.5.9 (server_args.py) runs speculative decoding without the overlap scheduler
        # (unless SGLANG_ENABLE_SPEC_V2) and without mixed chunked prefill.
        overlap_off = speculative
    radix_off = sched.disable_radix_cache
    if radix_off is None:
        # server_args.py: a decode server runs a chunk cache unless its radix cache is asked for.
        radix_off = role == "decode"
    return sched.model_copy(update={
        "disable_radix_cache": radix_off,
        "chunked_prefill_size": chunk, "mem_fraction_static": fraction, "context_length": context,
        "max_total_tokens": tokens, "max_running_requests": running, "disable_overlap_schedule": overlap_off,
        "enable_mixed_chunk": sched.enable_mixed_chunk and not speculative,
    })


def resolve_scheduler(sched: SglangSchedulerConfig, where: str, gpu: GpuSpec, model: ModelSpec,
                      deployment: Deployment, role_cfg, role: str) -> SglangSchedulerConfig:
    """The registry's entry point (engine/backend.py's `resolve_scheduler`)."""
    return resolve_sglang(sched, where, gpu, model, deployment, role_cfg.speculative is not None, role)
