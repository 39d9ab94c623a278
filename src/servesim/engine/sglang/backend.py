"""SGLang as servesim models it: the registry's entry (engine/backend.py says what each field is)."""

from __future__ import annotations

from servesim.engine.backend import Backend, carry_as, carry_as_not, imported_on_call
from servesim.engine.sglang.config import SglangSchedulerConfig
from servesim.engine.sglang.defaults import resolve_scheduler
from servesim.engine.request_path import RequestPathCosts


def make_scheduler(sched: SglangSchedulerConfig, kv, reference: bool):
    # Imported here: the schedulers import the engine core, which imports servesim.config,
    # which reads this registry entry while it loads.
    from servesim.engine.sglang.fast import FastSglangScheduler
    from servesim.engine.sglang.scheduler import SglangScheduler

    return (SglangScheduler if reference else FastSglangScheduler)(
        kv,
        max_running_requests=sched.max_running_requests,
        chunked_prefill_size=None if sched.chunked_prefill_size < 0 else sched.chunked_prefill_size,
        max_prefill_tokens=sched.max_prefill_tokens,
        schedule_policy=sched.schedule_policy,
        enable_mixed_chunk=sched.enable_mixed_chunk,
        init_new_token_ratio=sched.init_new_token_ratio,
        min_new_token_ratio=sched.min_new_token_ratio,
        new_token_ratio_decay=sched.new_token_ratio_decay,
        num_reserved_decode_tokens=sched.num_reserved_decode_tokens,
        recv_interval=sched.scheduler_recv_interval,
        max_model_len=sched.context_length,
        overlap=sched.overlap,
    )


def _read_chunked_prefill_size(value, _):
    return {"chunked": False} if value == -1 else {"budget": value, "chunked": True}


def _carry_write_extra(concepts: dict, origin: dict, kept: dict, out: dict) -> list[str]:
    refused = []
    if concepts.get("chunked") is False:
        # SGLang spells "no chunking" as chunked_prefill_size -1, leaving no key for a budget.
        if "budget" in concepts:
            refused.append(origin["budget"])
        out["chunked_prefill_size"] = -1
    return refused


SGLANG = Backend(
    name="sglang",
    label="SGLang",
    versions=("0.5.9",),    # docs/modeling/sglang.md: the PyPI wheel's scheduler
    schema=SglangSchedulerConfig,
    counterparts={"seqs": "max_running_requests", "budget": "chunked_prefill_size", "block": "page_size",
                  "kv_tokens": "max_total_tokens", "context": "context_length",
                  "memory_fraction": "mem_fraction_static", "prefix": "!disable_radix_cache",
                  "chunked": "chunked_prefill_size", "overlap": "!disable_overlap_schedule"},
    carry_reads={
        "max_running_requests": carry_as("seqs"), "chunked_prefill_size": _read_chunked_prefill_size,
        "page_size": carry_as("block"), "max_total_tokens": carry_as("kv_tokens"),
        "context_length": carry_as("context"), "disable_radix_cache": carry_as_not("prefix"),
        "disable_overlap_schedule": carry_as_not("overlap"),
    },
    carry_writes={"seqs": ("max_running_requests", int), "budget": ("chunked_prefill_size", int),
                  "block": ("page_size", int), "kv_tokens": ("max_total_tokens", int),
                  "context": ("context_length", int), "prefix": ("disable_radix_cache", lambda v: not v),
                  "overlap": ("disable_overlap_schedule", lambda v: not v)},
    carry_write_extra=_carry_write_extra,
    resolve_scheduler=resolve_scheduler,
    make_scheduler=make_scheduler,
    sweep_knobs=("max_running_requests", "chunked_prefill_size", "context_length"),
    kv_full_sequence_admission=False,   # SGLang budgets admission itself (its new-token ratio)
    kv_offload=True,                    # HiCache
    pp_refusal=("pipeline parallelism is not modelled for SGLang: it runs a separate scheduler loop for it "
                "(Scheduler.event_loop_pp, one micro-batch per stage, each stage notified by the one "
                "before), whose admission servesim does not follow yet"),
    # 0.5.9 server_args: enable_piecewise_cuda_graph defaults to False, so extend (prefill)
    # batches run eagerly; decode batches replay CUDA graphs.
    # sglang_router's mini_lb sends each request to a prefill and a decode server at once.
    pd_proxy_sequential=False,
    # SGLang 0.5: TokenizerManager → Scheduler.recv_requests (ZMQ), broadcast_pyobj to the TP
    # ranks, DetokenizerManager's two extra hops out (docs/modeling/request_path.md).
    request_path=RequestPathCosts(http_ms=0.5, to_engine_ms=0.2, broadcast_ms=0.5, output_ms=0.4),
    timing_profile="sglang",
    aic_backend="sglang",
    launch=imported_on_call("servesim.engine.sglang.launch", "sglang_launch"),
    front=imported_on_call("servesim.engine.sglang.launch", "sglang_front"),
    dynamo_worker=imported_on_call("servesim.engine.sglang.launch", "sglang_dynamo_worker"),
    dynamo_runtime="sglang",
)
