"""`simulate(config)`: the public entry point the CLI and sweeps call."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from servesim import __version__, limits, startup_gc
from servesim.api_checks import check_simulate_arguments
from servesim.cluster.build import build_cluster
from servesim.cluster.engine_choice import choose_engines
from servesim.config import SimulationConfig, config_hash, load_config
from servesim.errors import ServesimError
from servesim.gc_pace import young_collections_paced
from servesim.metrics.collector import Collector
from servesim.metrics.cost import check_cost, energy_and_cost
from servesim.metrics.records import RequestTable
from servesim.metrics.run_report import report_run
from servesim.metrics.summary import DEFAULT_PERCENTILES, check_percentiles, summarize
from servesim.config.resolution import resolve
from servesim.config.run_spec import RunSpec
from servesim.workload.clients import make_client
from servesim.metrics.jobs import JobTable
from servesim.metrics.sessions import session_table
from servesim.workload.agentic_trace import AgenticClient
from servesim.workload.session_trace import TraceSessionClient
from servesim.workload.sessions import session_client
from servesim.workload.synthetic import content_block_size, generate, synthetic_count
from servesim.workload.trace import TraceRequest, file_sha256, load_trace, trace_sha256


@dataclass
class Result:
    summary: dict[str, Any]
    requests: RequestTable                 # iterates RequestRecords sorted by request_id
    config: SimulationConfig               # the resolved config that ran
    warnings: list[str] = field(default_factory=list)
    # Per worker, in fleet order: sampled state over simulated time (metrics/collector.py).
    timelines: dict[str, dict[str, list]] = field(default_factory=dict)
    # simulate(detailed=True): each measured request's output delivery times (ns), by request id.
    token_times: dict[int, Any] | None = None
    # workload.sessions: one row per session (metrics/sessions.py), for sessions.csv.
    sessions: Any = None
    # An agentic trace: one row per job (metrics/jobs.py), for jobs.csv.
    jobs: Any = None


@dataclass(frozen=True)
class TrialRun:
    """A finished trial's run beside its summary: its spec, what its backend's witness proves
    (None: nothing), and per worker in the summary's order its integer KV-usage sums."""

    run: RunSpec
    witness: Any
    kv_sums: list[tuple[int, int]]   # (Σ used blocks × ns, most used blocks)
    sim_ns: int


def checked_run_spec(config: SimulationConfig | dict | str | Path | None,
                     overrides: list | None = None) -> tuple[Any, RunSpec]:
    """(the loaded config, its run spec): loaded, checked against the limits, resolved, and its
    cost block checked against its GPUs; a bad config raises ServesimError. What a run reads,
    and what a sweep's copied trial is compared on (sweep/sharing.py)."""
    loaded = load_config(config, overrides)
    limits.check_config(loaded.config, loaded.source)
    run = resolve(loaded)
    check_cost(run.config.cost, [role.deployment.gpu for role in run.roles.values()])
    return loaded, run


def _load_requests(run: RunSpec) -> tuple[Iterable[TraceRequest], dict[str, Any]]:
    workload = run.config.workload
    if workload.sessions is not None:   # made turn by turn by the client (workload/sessions.py)
        return (), {"trace": None, "trace_format": "sessions", "trace_sha256": None}
    if run.trace_path is not None:
        # One past the limit, so a longer trace is refused without being read whole.
        requests, fmt = load_trace(run.trace_path, workload.format, workload.max_requests or limits.MAX_REQUESTS + 1)
        if fmt == "weka-trace":
            from servesim.workload.weka_trace import check_block_size

            check_block_size(run.trace_path, workload.trace_block_size)
        info = {"trace": str(run.trace_path), "trace_format": fmt, "trace_sha256": trace_sha256(run.trace_path)}
        return requests, info
    synthetic = workload.synthetic
    lengths = run.lengths_path
    if lengths is not None and not lengths.is_file():
        problem = "is a folder, not a file" if lengths.is_dir() else "does not exist"
        raise ServesimError(f"workload.synthetic.lengths_from: {lengths} {problem}")
    stream = generate(synthetic, run.seed, lengths)
    if workload.max_requests is not None:
        stream = itertools.islice(stream, workload.max_requests)
    info = {"trace": None if lengths is None else str(lengths), "trace_format": "synthetic",
            "trace_sha256": None if lengths is None else file_sha256(lengths)}
    return stream, info


@young_collections_paced()
def simulate(
    config: SimulationConfig | dict | str | Path | None = None,
    *,
    trace: str | Path | None = None,
    seed: int | None = None,
    overrides: list[tuple[str, Any]] | None = None,
    pass_log: TextIO | None = None,
    progress=None,
    percentiles=None,
    detailed: bool = False,
) -> Result:
    """Run one simulation.

    `config` is a parsed config, a dict, a YAML path, or None for the embedded
    default. `trace` and `seed` replace the workload's trace and the root seed;
    `overrides` are (dotted.key, value) pairs (or a dict) applied before validation;
    a wrong argument type raises ServesimError naming the argument (api_checks.py).
    `pass_log` receives one JSON line per pass; `progress(sim_ns, done, total)`
    is called now and then. `percentiles` (default 50, 90, 95, 99) are those the
    summary reports for TTFT, TPOT, ITL and E2E (`p99.9_ttft_ms`, ...); `detailed`
    records each request's token times (`Result.token_times`, for vllm's
    `--save-detailed`).
    """
    return _simulate(config, trace, seed, overrides, pass_log, progress, percentiles, detailed)[0]


@young_collections_paced()
def simulate_trial(config: dict) -> tuple[Result, TrialRun]:
    """`simulate(config)` for a sweep's trial, with what a sibling trial's copy needs (sweep/sharing.py)."""
    result, run, sim, collector = _simulate(config)
    stats = collector.workers.values()
    return result, TrialRun(run, run.backend.run_witness(sim), [(s.kv_weighted, s.kv_max) for s in stats], sim.now)


def _simulate(config, trace=None, seed=None, overrides=None, pass_log=None, progress=None, percentiles=None,
              detailed=False):
    """simulate's run: (Result, the run spec, the finished simulation, its collector)."""
    wall_start = time.perf_counter()
    overrides = check_simulate_arguments(config, trace, seed, overrides, pass_log, progress)
    if trace is not None:
        overrides.append(("workload.trace", str(Path(trace).resolve())))
        overrides.append(("workload.synthetic", None))
        overrides.append(("workload.sessions", None))
    if seed is not None:
        overrides.append(("seed", seed))
    percentiles = DEFAULT_PERCENTILES if percentiles is None else check_percentiles(percentiles)
    if not isinstance(detailed, bool):
        raise ServesimError(f"detailed must be True or False, got {detailed!r}")
    loaded, run = checked_run_spec(config, overrides)   # the run spec: what every part below reads
    profile_given = (getattr(loaded.config.engine.timing, "profile", None) is not None
                     or getattr(loaded.config.engine.timing, "profile_file", None) is not None)
    cfg = run.config        # its resolved config: the workload, client and SLO blocks, and Result.config
    requests, trace_info = _load_requests(run)
    limits.check_requests(requests, cfg, run.source)
    if isinstance(requests, list) and trace_info["trace_format"] == "mooncake-sessions":
        client = TraceSessionClient(requests, cfg.workload.client, run.seed)
    elif isinstance(requests, list) and trace_info["trace_format"] in ("agentic-mooncake", "weka-trace"):
        client = AgenticClient(requests, cfg.workload.client, run.seed)
    elif cfg.workload.sessions is not None:
        client = session_client(cfg.workload.sessions, cfg.workload.client, run.seed,
                                content_block_size(cfg.workload))
    else:
        client = make_client(cfg.workload.client, requests, run.seed, total=synthetic_count(cfg.workload))

    # Start-up is over: what exists now (modules, schema, config, trace) is frozen. The cluster
    # is built after the freeze, since a sweep worker must be able to free its trials'
    # simulations (each holds cycles: workers point back at it).
    startup_gc.resume()
    collector = Collector(pass_log, run.warmup_requests, token_times=detailed)
    engines = choose_engines(run, pass_log is not None, detailed)
    sim = build_cluster(run, engines, client, collector, requests)

    if isinstance(requests, list):
        total = len(requests)
    elif cfg.workload.sessions is not None:
        total = client.source.total_turns   # as planned: a rejected turn ends its session early
    else:
        total = synthetic_count(cfg.workload)
    if run.warmup_requests >= total:
        raise ServesimError(f"workload.warmup_requests is {run.warmup_requests} but the workload has "
                            f"only {total} requests: nothing would be measured")
    with limits.clock_overflow_is_an_error():
        sim.run(progress=(lambda t, done: progress(t, done, total)) if progress else None)

    result = run_result(run, sim, collector, requests, engines, profile_given, percentiles, trace_info, wall_start,
                        client)
    return result, run, sim, collector


def run_result(run: RunSpec, sim, collector: Collector, requests, engines, profile_given: bool, percentiles,
               trace_info: dict[str, Any], wall_start: float, client=None) -> Result:
    """The `Result` of a simulation that has run to its end (simulate's, and `servesim serve`'s at its stop)."""
    cfg = run.config
    records = collector.records
    summary = summarize(records, collector.itl, cfg.slo, run.warmup_requests, percentiles,
                        collector.deliveries())
    wall_ms = (time.perf_counter() - wall_start) * 1e3
    gpus = run.gpus
    summary.update({
        "warmup_requests": run.warmup_requests,
        "passes": collector.num_passes,
        "preemptions": collector.num_preemptions,
        "peak_batch_requests": collector.peak_running,
        "num_gpu_blocks": {name: role.scheduler_cfg.kv_blocks for name, role in sim.roles.items()},
        "gpus": gpus,
        "gpu_hours": gpus * summary["duration_ms"] / 3.6e6,
        "busy_fraction": (sum(w.busy_ns for r in sim.roles.values() for w in r.workers)
                          / (sim.now * sum(len(r.workers) for r in sim.roles.values()))) if sim.now else None,
        "simulated_ms": sim.now / 1e6,
        "wall_time_ms": wall_ms,
        "servesim_version": __version__,
        "config_hash": config_hash(cfg),
        **trace_info,
        "mean_acceptance_length": _mean_acceptance_length(sim.roles),
        "workers": collector.worker_summaries(sim.now),
    })
    window = None
    if sim.autoscalers:
        window = _window(records, run.warmup_requests, summary["duration_ms"])
        scaled = {name: scaler.summary(*window) for name, (scaler, _) in sim.autoscalers.items()}
        # Replicas count while they exist (cluster/autoscaler.py), within the run's window.
        # A role that is not autoscaled (one pool of a P/D fleet) keeps its count all along.
        fixed = sum(role.gpus for name, role in run.roles.items() if name not in scaled)
        summary["gpu_hours"] = (sum(role["gpu_hours"] for role in scaled.values())
                                + fixed * summary["duration_ms"] / 3.6e6)
        summary["autoscaling"] = scaled
    summary.update(energy_and_cost(cfg.cost, _worker_power_inputs(run, sim, window), summary))
    notes = report_run(summary, records, run, sim, requests, profile_given, engines)
    sessions = None
    if client is None:   # servesim serve: the simulation's own client
        client = sim.client
    log = getattr(client, "session_log", None)   # sessions, generated or from a trace
    if log is not None:
        slo_ms = cfg.workload.sessions.slo_ms if cfg.workload.sessions is not None else None
        sessions = session_table(records, log, slo_ms)
        summary["sessions"] = sessions.summary()
    jobs = None
    if isinstance(client, AgenticClient):
        jobs = JobTable(records, requests)
        summary["agentic_jobs"] = jobs.summary()
    return Result(summary=summary, requests=records, config=cfg, warnings=notes, timelines=collector.timelines(),
                  token_times=collector.token_times, sessions=sessions, jobs=jobs)


def _window(records, warmup: int, duration_ms: float) -> tuple[int, int]:
    """The summary's window in ns: the first measured arrival, plus its duration."""
    arrival = records.column("arrival_ns")
    if warmup:
        arrival = arrival[records.column("request_id") >= warmup]
    start = int(arrival.min()) if arrival.size else 0
    return start, start + round(duration_ms * 1e6)


def _worker_power_inputs(run: RunSpec, sim, window: tuple[int, int] | None = None) -> list[tuple]:
    """(GPU, GPUs, busy fraction) of each worker, for metrics/cost.py."""
    out = []
    for name, role in sim.roles.items():
        spec = run.roles[name]
        gpus = spec.tp * spec.pp * spec.attention_dp
        scaled = sim.autoscalers.get(name)
        for worker in role.workers:
            if scaled is None or not sim.now:
                out.append((spec.deployment.gpu, gpus, worker.busy_ns / sim.now if sim.now else 0.0))
                continue
            # An autoscaled replica draws power while it exists: its GPUs for its share of the
            # window, busy for its share of its whole life.
            start, end = window
            within = scaled[0].lifetime_ns(worker.index, start, end)
            life = scaled[0].lifetime_ns(worker.index, 0, sim.now)
            share = within / (end - start) if end > start else 0.0
            out.append((spec.deployment.gpu, gpus * share, worker.busy_ns / life if life else 0.0))
    return out


def _mean_acceptance_length(roles) -> float | None:
    """Tokens per verification (accepted drafts + the bonus token), over every speculating worker."""
    verifications = tokens = 0
    for role in roles.values():
        for worker in role.workers:
            speculation = worker.scheduler.speculation
            if speculation is not None:
                verifications += speculation.verifications
                tokens += speculation.tokens
    return tokens / verifications if verifications else None
