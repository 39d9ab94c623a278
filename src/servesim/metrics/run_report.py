"""What `simulate` adds to a run's summary after it: what ran, rejections, warnings."""

from __future__ import annotations

from servesim.metrics import run_warnings as rules
from servesim.metrics.run_info import describe


def report_run(summary: dict, records, run, sim, trace_requests, profile_given: bool,
               engines) -> list[str]:
    """Fill summary's `simulated`, `rejected_by_reason` and `warnings`, and requests.csv's
    trace ids and errors; returns the warnings (sentences, in a fixed order)."""
    cfg = run.config
    backend = cfg.engine.backend
    if isinstance(trace_requests, list) and any(r.trace_id is not None for r in trace_requests):
        records.trace_ids = [r.trace_id for r in trace_requests]
    rejected = rules.label_rejections(records, sim.roles, sim.factories, backend)
    client = cfg.workload.client
    notes = [
        rules.overload_warning(records, client),
        rules.rejection_warning(rejected, len(records), sim.roles, backend),
        *(rules.profile_fallback_warning(cfg.engine.timing, gpu, backend, profile_given)
          for gpu in dict.fromkeys(role.deployment.gpu.name for role in run.roles.values())),
        *rules.arrival_warnings(trace_requests, run.trace_path, client),
    ]
    notes = [note for note in notes if note is not None]
    hf_ids = getattr(run.model, "hf_ids", None)
    summary["simulated"] = describe(cfg, run.gpu.name, engines, hf_ids[0] if hf_ids else cfg.model)
    summary["rejected_by_reason"] = rejected
    summary["warnings"] = notes
    return notes
