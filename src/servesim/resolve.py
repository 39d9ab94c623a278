"""Fill every `null` that stands for an engine default, so the resolved config says what ran."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from servesim.config import (
    LoadedConfig,
    RooflineTiming,
    SglangSchedulerConfig,
    SimulationConfig,
    TrtllmSchedulerConfig,
    VllmSchedulerConfig,
)
from servesim.cluster.fleet import check_fleet_size
from servesim.errors import ServesimError
from servesim.hardware import GpuSpec, resolve_gpu
from servesim.hardware.deployment import RUNTIME_RESERVE_GIB, Deployment, gib
from servesim.hardware.memory import check_pinned_tokens, check_pinned_vllm_blocks
from servesim.hardware.parallelism import check_parallelism, gpus_per_node
from servesim.models import ModelSpec, resolve_model

GIB = 1024**3


@dataclass(frozen=True)
class ResolvedRun:
    config: SimulationConfig     # every engine default filled in
    model: ModelSpec
    gpu: GpuSpec
    deployments: dict[str, Deployment]   # per role
    trace_path: Path | None
    source: str
    lengths_path: Path | None = None   # workload.synthetic.lengths_from, resolved


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


def _resolve_vllm(sched: VllmSchedulerConfig, where: str, gpu: GpuSpec, model: ModelSpec,
                  ngram: bool, deployment: Deployment, utilization: float) -> VllmSchedulerConfig:
    default_seqs, default_tokens = vllm_serving_defaults(gpu)
    max_num_seqs = sched.max_num_seqs or default_seqs
    max_num_batched_tokens = sched.max_num_batched_tokens or default_tokens
    max_model_len = sched.max_model_len or model.context_length
    # vLLM turns async scheduling on by default, except with ngram drafts.
    async_scheduling = (not ngram) if sched.async_scheduling is None else sched.async_scheduling
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
    return sched.model_copy(update={
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max_num_batched_tokens,
        "max_model_len": max_model_len,
        "async_scheduling": async_scheduling,
        "num_gpu_blocks": num_gpu_blocks,
    })


def _check_fits(where: str, context: int, capacity_tokens: int, knob: str) -> None:
    if capacity_tokens < context:
        raise ServesimError(
            f"{where}: a {context}-token context does not fit in the KV cache, which holds {capacity_tokens} "
            f"tokens ({context - capacity_tokens} short); lower the context length or raise {knob}"
        )


def _resolve_sglang(sched: SglangSchedulerConfig, where: str, gpu: GpuSpec, model: ModelSpec,
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
    _check_fits(where, context, tokens, "max_total_tokens")
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


def _resolve_trtllm(sched: TrtllmSchedulerConfig, where: str, model: ModelSpec,
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
    _check_fits(where, context, tokens, "max_tokens")
    return sched.model_copy(update={"max_seq_len": context, "max_tokens": tokens})


def resolve(loaded: LoadedConfig) -> ResolvedRun:
    config = loaded.config.model_copy(deep=True)
    model = resolve_model(config.model, loaded.base_dir)
    gpu = resolve_gpu(config.gpu)
    config.model = model.name if not model.name.endswith(".json") else str(Path(model.name).resolve())
    config.gpu = gpu.name
    backend = config.engine.backend
    native = model.arch.native_dtype if model.arch.native_dtype in ("bf16", "fp8") else "bf16"
    config.precision = config.precision or native
    if config.kv_cache_dtype == "auto":
        config.kv_cache_dtype = "fp8" if config.precision in ("fp8", "fp4") else "bf16"
    check_fleet_size(config)
    deployments = {}
    for role, role_cfg in config.engine.roles().items():
        where = f"engine.workers.{role}.scheduler"
        role_cfg.gpus_per_node = gpus_per_node(role_cfg.gpus_per_node, gpu)
        check_parallelism(f"engine.workers.{role}", model.arch, gpu, tp=role_cfg.tp, attention_dp=role_cfg.attention_dp,
                          ep=role_cfg.ep, pp=role_cfg.pp, node_gpus=role_cfg.gpus_per_node)
        if role_cfg.pp != 1:
            raise ServesimError(f"engine.workers.{role}.pp: pipeline parallelism is not modelled yet; use pp: 1")
        deployment = deployments[role] = Deployment(model.arch, gpu, config.precision, config.kv_cache_dtype,
                                                    tp=role_cfg.tp, attention_dp=role_cfg.attention_dp,
                                                    ep=role_cfg.ep)
        ngram = role_cfg.speculative is not None and role_cfg.speculative.method == "ngram"
        if backend == "vllm":
            role_cfg.scheduler = _resolve_vllm(role_cfg.scheduler, where, gpu, model, ngram, deployment,
                                               role_cfg.gpu_memory_utilization)
        elif backend == "sglang":
            role_cfg.scheduler = _resolve_sglang(role_cfg.scheduler, where, gpu, model, deployment,
                                                 role_cfg.speculative is not None, role)
        else:
            role_cfg.scheduler = _resolve_trtllm(role_cfg.scheduler, where, model, deployment)
            if role_cfg.scheduler.disable_overlap_scheduler is None:
                # TensorRT-LLM's PyTorch executor turns its overlap scheduler off for n-gram drafting.
                role_cfg.scheduler.disable_overlap_scheduler = ngram
    timing = config.engine.timing
    if isinstance(timing, RooflineTiming) and timing.profile is None:
        # Record which fitted profile the run uses (config.resolved.yaml shows it).
        from servesim.timing.roofline import fitted_profile

        _, key = fitted_profile(gpu.name, backend)
        if key != "built-in defaults":
            timing.profile = key
    trace_path = loaded.trace_path()
    if trace_path is not None:
        trace_path = trace_path.resolve()
        config.workload.trace = str(trace_path)
    lengths_path = None
    synthetic = config.workload.synthetic
    if synthetic is not None and synthetic.lengths_from is not None:
        lengths_path = Path(synthetic.lengths_from).expanduser()
        if not lengths_path.is_absolute():
            lengths_path = loaded.base_dir / lengths_path
        lengths_path = lengths_path.resolve()
        synthetic.lengths_from = str(lengths_path)
    return ResolvedRun(config, model, gpu, deployments, trace_path, loaded.source, lengths_path)
