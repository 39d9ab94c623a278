"""TensorRT-LLM's defaults for every null in its scheduler config (trtllm-serve's LLM API)."""

from __future__ import annotations

from servesim.engine.trtllm.config import TrtllmSchedulerConfig
from servesim.errors import ServesimError
from servesim.hardware import GpuSpec
from servesim.hardware.deployment import GIB, RUNTIME_RESERVE_GIB, Deployment, gib
from servesim.hardware.memory import check_context_fits, check_pinned_tokens
from servesim.models import ModelSpec


def resolve_trtllm(sched: TrtllmSchedulerConfig, where: str, model: ModelSpec,
                    deployment: Deployment) -> TrtllmSchedulerConfig:
    """trtllm-serve's defaults (LLM API KvCacheConfig / BuildConfig)."""
    context = sched.max_seq_len or model.context_length
    # The KV cache takes free_gpu_memory_fraction of what weights and the runtime leave.
    deployment.check_weights_fit()
    memory = deployment.gpu.memory_gib * GIB
    left = max(memory - deployment.weight_bytes_per_gpu() - RUNTIME_RESERVE_GIB * GIB, 0) \
        * sched.free_gpu_memory_fraction
    spent = (f"weights ({gib(deployment.weight_bytes_per_gpu())}), the runtime reserve "
             f"({gib(RUNTIME_RESERVE_GIB * GIB)}) and free_gpu_memory_fraction {sched.free_gpu_memory_fraction} "
             f"of the rest of the {gib(memory)} {deployment.gpu.name}")
    profiled = int(left // deployment.kv_bytes_per_token_per_gpu()) * deployment.attention_dp
    profiled -= profiled % sched.tokens_per_block
    if profiled <= 0:
        raise ServesimError(f"{where}: {deployment.placement} leaves no room for a KV cache: {gib(left)} is "
                            f"left after {spent}; raise tp")
    tokens = sched.max_tokens
    if tokens is None:
        tokens = profiled
    else:
        check_pinned_tokens(where, "max_tokens", deployment, tokens, left, spent, "TensorRT-LLM", profiled)
    check_context_fits(where, context, tokens, "max_tokens")
    return sched.model_copy(update={"max_seq_len": context, "max_tokens": tokens})


def resolve_scheduler(sched: TrtllmSchedulerConfig, where: str, gpu: GpuSpec, model: ModelSpec,
                      deployment: Deployment, role_cfg, role: str) -> TrtllmSchedulerConfig:
    """The registry's entry point (engine/backend.py's `resolve_scheduler`)."""
    resolved = resolve_trtllm(sched, where, model, deployment)
    if resolved.disable_overlap_scheduler is None:
        # TensorRT-LLM's PyTorch executor turns its overlap scheduler off for n-gram drafting.
        ngram = role_cfg.speculative is not None and role_cfg.speculative.method == "ngram"
        resolved.disable_overlap_scheduler = ngram
    return resolved
