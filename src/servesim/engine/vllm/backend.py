"""vLLM as servesim models it: the registry's entry (engine/backend.py says what each field is)."""

from __future__ import annotations

from servesim.engine.backend import Backend, carry_as, imported_on_call
from servesim.engine.vllm.config import VllmSchedulerConfig
from servesim.engine.vllm.defaults import resolve_scheduler
from servesim.errors import ServesimError
from servesim.engine.request_path import RequestPathCosts


def make_scheduler(sched: VllmSchedulerConfig, kv, reference: bool):
    # Imported here: the schedulers import the engine core, which imports servesim.config,
    # which reads this registry entry while it loads.
    from servesim.engine.vllm.fast import FastVllmScheduler
    from servesim.engine.vllm.scheduler import VllmScheduler

    return (VllmScheduler if reference else FastVllmScheduler)(
        kv,
        max_num_seqs=sched.max_num_seqs,
        max_num_batched_tokens=sched.max_num_batched_tokens,
        max_model_len=sched.max_model_len,
        enable_chunked_prefill=sched.enable_chunked_prefill,
        long_prefill_token_threshold=sched.long_prefill_token_threshold,
        async_scheduling=sched.async_scheduling,
    )


def _watermark_blocks(sched: VllmSchedulerConfig) -> int:
    return int(sched.watermark * sched.num_gpu_blocks)


def _check_role(role_cfg, where: str, source_of) -> None:
    spec = role_cfg.speculative
    if role_cfg.scheduler.async_scheduling is True and spec and spec.method == "ngram":
        raise ServesimError(
            f"{source_of(f'{where}.async_scheduling')}: {where}.async_scheduling: true cannot be combined "
            "with ngram speculative decoding (vLLM runs ngram drafts synchronously); leave it unset or "
            "set it to false"
        )
    if role_cfg.scheduler.async_scheduling is True and role_cfg.pp > 1:
        raise ServesimError(
            f"{source_of(f'{where}.async_scheduling')}: {where}.async_scheduling: true cannot be combined "
            f"with pp {role_cfg.pp} (servesim models vLLM's pipeline batch queue without async scheduling's "
            "output placeholders); leave it unset or set it to false"
        )


def _carry_write_extra(concepts: dict, origin: dict, kept: dict, out: dict) -> list[str]:
    if "kv_tokens" in concepts:
        # vLLM sizes its pool in blocks: the same tokens in blocks of the (new or default) block_size.
        default_block = VllmSchedulerConfig.model_fields["block_size"].default
        block = kept.get("block_size", out.get("block_size", default_block))
        if isinstance(block, int) and not isinstance(block, bool) and block > 0:
            out["num_gpu_blocks"] = concepts["kv_tokens"] // block
    return []


VLLM = Backend(
    name="vllm",
    label="vLLM",
    versions=("0.32.0",),   # docs/modeling/vllm.md: v1 Scheduler/AsyncScheduler, checked by the oracle
    schema=VllmSchedulerConfig,
    counterparts={"seqs": "max_num_seqs", "budget": "max_num_batched_tokens", "block": "block_size",
                  "kv_tokens": "num_gpu_blocks", "context": "max_model_len",
                  "memory_fraction": "gpu_memory_utilization", "prefix": "enable_prefix_caching",
                  "chunked": "enable_chunked_prefill", "overlap": "async_scheduling"},
    carry_reads={
        "max_num_seqs": carry_as("seqs"), "max_num_batched_tokens": carry_as("budget"),
        "enable_chunked_prefill": carry_as("chunked"), "block_size": carry_as("block"),
        "num_gpu_blocks": lambda value, old: {"kv_tokens": value * old.block_size},
        "max_model_len": carry_as("context"), "enable_prefix_caching": carry_as("prefix"),
        "async_scheduling": carry_as("overlap"),
    },
    carry_writes={"seqs": ("max_num_seqs", int), "budget": ("max_num_batched_tokens", int),
                  "chunked": ("enable_chunked_prefill", bool), "block": ("block_size", int),
                  "context": ("max_model_len", int), "prefix": ("enable_prefix_caching", bool),
                  "overlap": ("async_scheduling", bool)},
    carry_write_extra=_carry_write_extra,
    resolve_scheduler=resolve_scheduler,
    make_scheduler=make_scheduler,
    sweep_knobs=("max_num_seqs", "max_num_batched_tokens", "max_model_len"),
    budget_covers_running=True,
    kv_full_sequence_admission=True,
    kv_watermark_blocks=_watermark_blocks,
    check_role=_check_role,
    kv_offload=True,
    pp_refusal=None,   # the batch queue of depth pp (engine/pipeline.py, docs/modeling/vllm.md)
    # vLLM 0.32: OpenAIServingCompletion.create_completion, AsyncLLM.add_request and
    # InputProcessor.process_inputs, AsyncMPClient → EngineCoreProc over ZMQ; the engine core
    # hands requests to its workers itself, inside the pass (docs/modeling/request_path.md).
    request_path=RequestPathCosts(http_ms=0.5, to_engine_ms=0.3, broadcast_ms=0.0, output_ms=0.3),
    # Piecewise CUDA graphs (attention outside them) for every pass up to the capture size.
    prefill_graph_tokens=lambda sched: sched.max_cudagraph_capture_size,
    # Trials differing only in max_num_seqs whose run is one (engine/vllm/shared_runs.py).
    share_key=imported_on_call("servesim.engine.vllm.shared_runs", "share_key"),
    run_witness=imported_on_call("servesim.engine.vllm.shared_runs", "run_witness"),
    run_covers=imported_on_call("servesim.engine.vllm.shared_runs", "run_covers"),
    timing_profile="vllm",
    aic_backend="vllm",
    launch=imported_on_call("servesim.engine.vllm.launch", "vllm_launch"),
    front=imported_on_call("servesim.engine.vllm.launch", "vllm_front"),
    dynamo_worker=imported_on_call("servesim.engine.vllm.launch", "vllm_dynamo_worker"),
    dynamo_runtime="vllm",
    llm_d_model_command="vllmServe",
)
