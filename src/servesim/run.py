"""`simulate(config)`: the public entry point the CLI and sweeps call."""

from __future__ import annotations

import itertools
import time
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from servesim import __version__
from servesim.cluster.simulation import Simulation
from servesim.config import SimulationConfig, config_hash, load_config
from servesim.engine.fast_vllm import FastVllmScheduler
from servesim.engine.kv_cache import KvCache
from servesim.engine.reference_kv_cache import ReferenceKvCache
from servesim.engine.request import Request
from servesim.engine.vllm_scheduler import VllmScheduler
from servesim.engine.worker import Worker
from servesim.metrics.collector import Collector
from servesim.metrics.records import RequestTable
from servesim.metrics.summary import summarize
from servesim.resolve import ResolvedRun, resolve
from servesim.timing import build_timing_model
from servesim.workload.clients import make_client
from servesim.workload.prompt import BlockKeys, PrefixInterner
from servesim.workload.synthetic import generate
from servesim.workload.trace import TraceRequest, file_sha256, load_trace


@dataclass
class Result:
    summary: dict[str, Any]
    requests: RequestTable                 # iterates RequestRecords sorted by request_id
    config: SimulationConfig               # the resolved config that ran
    warnings: list[str] = field(default_factory=list)


def _load_requests(run: ResolvedRun) -> tuple[Iterable[TraceRequest], dict[str, Any]]:
    workload = run.config.workload
    if run.trace_path is not None:
        requests, fmt = load_trace(run.trace_path, workload.format, workload.max_requests)
        info = {"trace": str(run.trace_path), "trace_format": fmt, "trace_sha256": file_sha256(run.trace_path)}
        return requests, info
    synthetic = workload.synthetic
    lengths = run.lengths_path
    stream = generate(synthetic, run.config.seed, lengths)
    if workload.max_requests is not None:
        stream = itertools.islice(stream, workload.max_requests)
    info = {"trace": None if lengths is None else str(lengths), "trace_format": "synthetic",
            "trace_sha256": None if lengths is None else file_sha256(lengths)}
    return stream, info


def simulate(
    config: SimulationConfig | dict | str | Path | None = None,
    *,
    trace: str | Path | None = None,
    seed: int | None = None,
    overrides: list[tuple[str, Any]] | None = None,
    pass_log: TextIO | None = None,
    progress=None,
) -> Result:
    """Run one simulation.

    `config` is a parsed config, a dict, a YAML path, or None for the embedded
    default. `trace` and `seed` replace the workload's trace and the root seed;
    `overrides` are (dotted.key, value) pairs applied before validation.
    `pass_log` receives one JSON line per pass; `progress(sim_ns, done, total)`
    is called now and then.
    """
    wall_start = time.perf_counter()
    overrides = list(overrides or [])
    if trace is not None:
        overrides.append(("workload.trace", str(Path(trace).resolve())))
        overrides.append(("workload.synthetic", None))
    if seed is not None:
        overrides.append(("seed", seed))
    run = resolve(load_config(config, overrides))
    cfg = run.config
    requests, trace_info = _load_requests(run)
    client = make_client(cfg.workload.client, requests, cfg.seed)

    role = cfg.engine.workers.aggregated
    sched_cfg = role.scheduler
    notes = []
    if role.speculative is not None:
        notes.append("speculative decoding is parsed but not simulated yet: decoding one token per pass")
    for note in notes:
        warnings.warn(note, stacklevel=2)
    interner = PrefixInterner()
    trace_block_size = cfg.workload.trace_block_size

    def make_request(trace_request: TraceRequest, arrival_ns: int, engine_arrival_ns: int) -> Request:
        keys = None
        if sched_cfg.enable_prefix_caching:
            keys = BlockKeys(trace_request.request_id, trace_request.input_length, trace_request.hash_ids,
                             sched_cfg.block_size, trace_block_size, interner)
        max_tokens = min(trace_request.output_length, max(sched_cfg.max_model_len - trace_request.input_length, 0))
        return Request(trace_request.request_id, arrival_ns, engine_arrival_ns, trace_request.input_length,
                       max_tokens, trace_request.output_length, keys)

    collector = Collector(pass_log)
    sim = Simulation(
        client=client,
        tokenization_ns=round(cfg.engine.tokenization_ms * 1e6),
        max_model_len=sched_cfg.max_model_len,
        make_request=make_request,
        collector=collector,
    )
    # The pass log lists every request of every pass, which the fast engine does not visit.
    use_reference = cfg.engine.reference or pass_log is not None
    kv = (ReferenceKvCache if use_reference else KvCache)(
        num_gpu_blocks=sched_cfg.num_gpu_blocks,
        block_size=sched_cfg.block_size,
        enable_caching=sched_cfg.enable_prefix_caching,
        max_model_len=sched_cfg.max_model_len,
        watermark_blocks=int(sched_cfg.watermark * sched_cfg.num_gpu_blocks),
    )
    scheduler_class = VllmScheduler if use_reference else FastVllmScheduler
    scheduler = scheduler_class(
        kv,
        max_num_seqs=sched_cfg.max_num_seqs,
        max_num_batched_tokens=sched_cfg.max_num_batched_tokens,
        max_model_len=sched_cfg.max_model_len,
        enable_chunked_prefill=sched_cfg.enable_chunked_prefill,
        long_prefill_token_threshold=sched_cfg.long_prefill_token_threshold,
        async_scheduling=sched_cfg.async_scheduling,
    )
    timing = build_timing_model(cfg.engine.timing, run.deployment, cfg.engine.backend)
    worker = Worker("aggregated-0", scheduler, timing,
                    sched_cfg.async_scheduling, sim, sim.on_pass_done)
    sim.workers.append(worker)

    if isinstance(requests, list):
        total = len(requests)
    else:
        total = min(cfg.workload.synthetic.num_requests, cfg.workload.max_requests or 1 << 62)
    sim.run(progress=(lambda t, done: progress(t, done, total)) if progress else None)

    records = collector.records
    summary = summarize(records, collector.itl, cfg.slo, cfg.workload.warmup_requests)
    wall_ms = (time.perf_counter() - wall_start) * 1e3
    summary.update({
        "passes": collector.num_passes,
        "preemptions": collector.num_preemptions,
        "peak_batch_requests": collector.peak_running,
        "num_gpu_blocks": sched_cfg.num_gpu_blocks,
        "busy_fraction": worker.busy_ns / sim.now if sim.now else None,
        "simulated_ms": sim.now / 1e6,
        "wall_time_ms": wall_ms,
        "servesim_version": __version__,
        "config_hash": config_hash(cfg),
        **trace_info,
    })
    return Result(summary=summary, requests=records, config=cfg, warnings=notes)
