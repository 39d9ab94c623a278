"""vLLM's defaults for every null in its scheduler config (`vllm serve` 0.32's rules)."""

from __future__ import annotations

from servesim.engine.vllm.config import VllmSchedulerConfig
from servesim.errors import ServesimError
from servesim.hardware import GpuSpec
from servesim.hardware.deployment import GIB, RUNTIME_RESERVE_GIB, Deployment, gib
from servesim.hardware.memory import per_rank
from servesim.models import ModelSpec


def check_pinned_vllm_blocks(where: str, d: Deployment, num_gpu_blocks: int, block_size: int,
                             max_num_batched_tokens: int, max_num_seqs: int) -> None:
    """`num_gpu_blocks` (all attention-DP ranks together) against the whole GPU.

    vLLM 0.32 (`v1/core/kv_cache_utils.py`, `num_gpu_blocks_override`) allocates the pinned
    number of blocks whatever its profile found, so a larger one runs the GPU out of memory:
    the limit is the whole device after weights, activations and the runtime reserve
    (gpu_memory_utilization does not apply to a pinned count).
    """
    memory = d.gpu.memory_gib * GIB
    left = d.vllm_kv_bytes_left(memory, f"the {gib(memory)} of one {d.gpu.name}", max_num_batched_tokens,
                                max_num_seqs)
    per_block = block_size * d.kv_bytes_per_token_per_gpu()
    need = per_rank(num_gpu_blocks, d.attention_dp) * per_block
    if need <= left:
        return
    most = int(left // per_block) * d.attention_dp
    activations = d.activation_bytes(max_num_batched_tokens, max_num_seqs)
    raise ServesimError(
        f"{where}.num_gpu_blocks: {num_gpu_blocks:,} blocks need {gib(need)} of KV cache per GPU but only "
        f"{gib(left)} is left after weights ({gib(d.weight_bytes_per_gpu())}), activations ({gib(activations)}) "
        f"and the runtime reserve ({gib(RUNTIME_RESERVE_GIB * GIB)}) on the {gib(memory)} {d.gpu.name}; vLLM "
        f"would allocate them all and run out of memory, so use at most {most:,} or leave it null"
    )


def vllm_serving_defaults(gpu: GpuSpec) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) of `vllm serve` on this GPU.

    vLLM 0.32 `EngineArgs.get_batch_defaults` (engine/arg_utils.py), OpenAI server
    context: >= 160 GiB: 1024 / 16384; >= 70 GiB and not an A100: 1024 / 8192;
    otherwise 256 / 2048.
    """
    if gpu.memory_gib >= 160:
        return 1024, 16384
    if gpu.memory_gib >= 70 and "a100" not in gpu.device_name.lower():
        return 1024, 8192
    return 256, 2048


def resolve_vllm(sched: VllmSchedulerConfig, where: str, gpu: GpuSpec, model: ModelSpec,
                  synchronous: bool, deployment: Deployment, utilization: float,
                  speculative_tokens: int = 0) -> VllmSchedulerConfig:
    default_seqs, default_tokens = vllm_serving_defaults(gpu)
    max_num_seqs = sched.max_num_seqs or default_seqs
    max_num_batched_tokens = sched.max_num_batched_tokens or default_tokens
    max_model_len = sched.max_model_len or model.context_length
    # vLLM turns async scheduling on by default, except with ngram drafts (and servesim at pp > 1).
    async_scheduling = (not synchronous) if sched.async_scheduling is None else sched.async_scheduling
    # vLLM checks its arguments (SchedulerConfig) before it profiles memory.
    if not sched.enable_chunked_prefill and max_num_batched_tokens < max_model_len:
        raise ServesimError(
            f"{where}: with chunked prefill disabled, max_num_batched_tokens ({max_num_batched_tokens}) must be "
            f"at least max_model_len ({max_model_len}), as vLLM requires; raise it or lower max_model_len"
        )
    if max_num_batched_tokens < max_num_seqs:
        raise ServesimError(
            f"{where}: max_num_batched_tokens ({max_num_batched_tokens}) must be at least max_num_seqs "
            f"({max_num_seqs}), as vLLM requires"
        )
    num_gpu_blocks = sched.num_gpu_blocks
    if num_gpu_blocks is None:
        # Each attention-DP rank profiles its own cache; the worker's scheduler holds them all.
        per_rank = deployment.num_gpu_blocks(sched.block_size, utilization, max_num_batched_tokens,
                                             max_num_seqs)
        num_gpu_blocks = per_rank * deployment.attention_dp
        if num_gpu_blocks < 2:
            raise ServesimError(f"{where}: the KV cache would hold no block at all")
    else:
        check_pinned_vllm_blocks(where, deployment, num_gpu_blocks, sched.block_size, max_num_batched_tokens,
                                 max_num_seqs)
    usable_tokens = (num_gpu_blocks - 1) * sched.block_size
    if usable_tokens < max_model_len:
        raise ServesimError(
            f"{where}: max_model_len {max_model_len} does not fit in the KV cache, which holds "
            f"{usable_tokens} tokens ({num_gpu_blocks - 1} usable blocks of {sched.block_size}), "
            f"{max_model_len - usable_tokens} tokens short; lower max_model_len or raise num_gpu_blocks"
        )
    # VllmConfig._set_cudagraph_sizes: twice the largest decode batch, at most 512 tokens and the budget.
    capture = sched.max_cudagraph_capture_size or min(max_num_seqs * (1 + speculative_tokens) * 2, 512,
                                                      max_num_batched_tokens)
    return sched.model_copy(update={
        "max_cudagraph_capture_size": capture,
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max_num_batched_tokens,
        "max_model_len": max_model_len,
        "async_scheduling": async_scheduling,
        "num_gpu_blocks": num_gpu_blocks,
    })


def resolve_scheduler(sched: VllmSchedulerConfig, where: str, gpu: GpuSpec, model: ModelSpec,
                      deployment: Deployment, role_cfg, role: str) -> VllmSchedulerConfig:
    """The registry's entry point (engine/backend.py's `resolve_scheduler`)."""
    ngram = role_cfg.speculative is not None and role_cfg.speculative.method == "ngram"
    # At pp > 1 servesim runs the batch queue without async scheduling's output placeholders
    # (docs/modeling/vllm.md, "Pipeline parallelism"), so null resolves to off there.
    synchronous = ngram or role_cfg.pp > 1
    drafts = role_cfg.speculative.num_speculative_tokens if role_cfg.speculative is not None else 0
    return resolve_vllm(sched, where, gpu, model, synchronous, deployment, role_cfg.gpu_memory_utilization,
                        drafts)
