"""TensorRT-LLM as servesim models it: the registry's entry (engine/backend.py says what each field is)."""

from __future__ import annotations

from servesim.engine.backend import Backend, carry_as, carry_as_not, imported_on_call
from servesim.engine.trtllm.config import TrtllmSchedulerConfig
from servesim.engine.trtllm.defaults import resolve_scheduler
from servesim.engine.request_path import RequestPathCosts
from servesim.errors import ServesimError


def make_scheduler(sched: TrtllmSchedulerConfig, kv, reference: bool):
    # Imported here: the schedulers import the engine core, which imports servesim.config,
    # which reads this registry entry while it loads.
    from servesim.engine.trtllm.group import FastTrtllmScheduler
    from servesim.engine.trtllm.scheduler import TrtllmScheduler

    return (TrtllmScheduler if reference else FastTrtllmScheduler)(
        kv,
        max_batch_size=sched.max_batch_size,
        max_num_tokens=sched.max_num_tokens,
        capacity_scheduler_policy=sched.capacity_scheduler_policy,
        enable_chunked_context=sched.enable_chunked_context,
        max_model_len=sched.max_seq_len,
        overlap=sched.overlap,
        batch_wait_timeout_iters=sched.batch_wait_timeout_iters,
        batch_wait_max_tokens_ratio=sched.batch_wait_max_tokens_ratio,
    )


def _check_role(role_cfg, where: str, source_of) -> None:
    sched = role_cfg.scheduler
    waits = sched.batch_wait_timeout_iters > 0 or sched.batch_wait_max_tokens_ratio > 0
    if waits and role_cfg.attention_dp > 1:
        key = f"{where}.batch_wait_timeout_iters"
        raise ServesimError(
            f"{source_of(key)}: {where}: batch waiting with attention_dp {role_cfg.attention_dp} is not modelled "
            "(TensorRT-LLM skips it under attention DP and balances context requests across ranks instead); "
            "drop batch_wait_timeout_iters and batch_wait_max_tokens_ratio or use attention_dp: 1"
        )


def reject_reason(sched: TrtllmSchedulerConfig, input_length: int) -> str | None:
    # Without chunked context a prompt must fit one iteration's token budget.
    if not sched.enable_chunked_context and input_length > sched.max_num_tokens:
        return "prompt_exceeds_token_budget"
    return None


def rejection_text(code: str, input_length: int, sched: TrtllmSchedulerConfig) -> str | None:
    """requests.csv's `error` cell for a reason `reject_reason` gave."""
    if code == "prompt_exceeds_token_budget":
        return f"prompt of {input_length} tokens exceeds max_num_tokens {sched.max_num_tokens} without chunked context"
    return None


def rejection_summary(code: str, count: int, sched: TrtllmSchedulerConfig) -> str | None:
    """The run warning's words for `count` requests refused for that reason."""
    if code == "prompt_exceeds_token_budget":
        return (f"{count:,} with a prompt longer than the token budget max_num_tokens "
                f"({sched.max_num_tokens:,}) while enable_chunked_context is off")
    return None


TRTLLM = Backend(
    name="trtllm",
    label="TensorRT-LLM",
    versions=("1.2.0rc2",),  # docs/modeling/trtllm.md: version.py of the sources read
    schema=TrtllmSchedulerConfig,
    counterparts={"seqs": "max_batch_size", "budget": "max_num_tokens", "block": "tokens_per_block",
                  "kv_tokens": "max_tokens", "context": "max_seq_len",
                  "memory_fraction": "free_gpu_memory_fraction", "prefix": "enable_block_reuse",
                  "chunked": "enable_chunked_context", "overlap": "!disable_overlap_scheduler"},
    carry_reads={
        "max_batch_size": carry_as("seqs"), "max_num_tokens": carry_as("budget"),
        "enable_chunked_context": carry_as("chunked"), "tokens_per_block": carry_as("block"),
        "max_tokens": carry_as("kv_tokens"), "max_seq_len": carry_as("context"),
        "enable_block_reuse": carry_as("prefix"), "disable_overlap_scheduler": carry_as_not("overlap"),
    },
    carry_writes={"seqs": ("max_batch_size", int), "budget": ("max_num_tokens", int),
                  "chunked": ("enable_chunked_context", bool), "block": ("tokens_per_block", int),
                  "kv_tokens": ("max_tokens", int), "context": ("max_seq_len", int),
                  "prefix": ("enable_block_reuse", bool), "overlap": ("disable_overlap_scheduler", lambda v: not v)},
    resolve_scheduler=resolve_scheduler,
    make_scheduler=make_scheduler,
    sweep_knobs=("max_batch_size", "max_num_tokens", "max_seq_len"),
    kv_full_sequence_admission=False,   # the capacity scheduler budgets admission itself
    reject_reason=reject_reason,
    rejection_text=rejection_text,
    rejection_summary=rejection_summary,
    kv_offload=False,
    pp_refusal=("pipeline parallelism is not modelled for TensorRT-LLM: its executor runs a separate "
                "loop for it (PyExecutor._executor_loop_pp, pp micro-batches scheduled in turn), whose "
                "admission servesim does not follow yet"),
    # PyTorchModelEngine: CUDA graphs cover generation-only batches; a batch with context
    # requests runs eagerly unless piecewise graphs are turned on (off by default).
    # TensorRT-LLM 1.x trtllm-serve: OpenAIServer, GenerationExecutorProxy → worker (ZMQ),
    # ExecutorRequestQueue's broadcast to the ranks, the response path back
    # (docs/modeling/request_path.md).
    request_path=RequestPathCosts(http_ms=1.0, to_engine_ms=0.3, broadcast_ms=0.5, output_ms=0.4),
    check_role=_check_role,
    timing_profile="trtllm",
    aic_backend="trtllm",
    launch=imported_on_call("servesim.engine.trtllm.launch", "trtllm_launch"),
    front=imported_on_call("servesim.engine.trtllm.launch", "trtllm_front"),
)
