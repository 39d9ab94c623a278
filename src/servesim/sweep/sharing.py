"""Sweep trials that compute one run: their groups, and a sibling's outcome from its group's run.

A backend may say (engine/backend.py `share_key`) which trial configs differ only in knobs its
run can prove it did not read; the runner hands each such group to a worker as one job
(executor.run_group), which runs its highest-ranked trial and copies that run's outcome for
every sibling the backend's witness proves computes the same run (`run_covers`); the siblings
it does not cover go back to the executor as a group of their own. A copy is the run's summary with what the sibling's own config
gives corrected: its `num_gpu_blocks`, `config_hash`, and each worker's KV utilisation (the
same integer block usage over its own usable blocks); its `wall_time_ms` and `wall_time_s` are
the time the copy took. The stored rows are those of a sweep without sharing but for wall times
(tests/test_shared_runs.py); docs/modeling/shared_runs.md has the rule and its argument.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from typing import Any

from servesim.errors import ServesimError

# Router policies that read the workers' KV caches (their use or their cached prefixes) and
# autoscaling, whose policies read KV use: with them a pool of another size routes otherwise.
_KV_READING_ROUTERS = ("kv_aware", "llm_d")


def share_groups(trials: Sequence[Any]) -> list[list[Any]]:
    """The trials (sweep/trials.py Trial) as groups that may share a run, each led by its highest
    rank (then lowest id); larger groups first (they take longest), else in trial order."""
    from servesim.engine.registry import BACKENDS, DEFAULT_BACKEND

    keyed: dict[str, list[tuple[int, Any]]] = {}
    groups: list[list[tuple[int, Any]]] = []
    for trial in trials:
        engine = trial.config.get("engine")
        name = (engine.get("backend") if isinstance(engine, dict) else None) or DEFAULT_BACKEND
        backend = BACKENDS.get(name) if isinstance(name, str) else None
        key = None if backend is None else backend.share_key(trial.config)
        if key is None:
            groups.append([(0, trial)])
            continue
        group = keyed.get(key[0])
        if group is None:
            group = keyed[key[0]] = []
            groups.append(group)
        group.append((key[1], trial))
    ordered = [[trial for _, trial in sorted(group, key=lambda rt: (-rt[0], rt[1].trial_id))] for group in groups]
    return sorted(ordered, key=len, reverse=True)


def copied_outcome(source: Any, summary: dict, config: dict) -> dict | None:
    """The outcome of the trial `config` as the run `source` (run.TrialRun, whose stored summary is
    `summary`) computed it, or None when that is not proven (the trial must run)."""
    from servesim.config import config_hash
    from servesim.metrics.collector import kv_utilization
    from servesim.run import checked_run_spec

    start = time.perf_counter()
    if summary.get("preemptions"):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run = checked_run_spec(config)[1]
    except ServesimError:
        return None   # its own run says how it fails
    witnessed = source.run
    if (run.backend is not witnessed.backend or _outside_schedulers(run.config) != _outside_schedulers(
            witnessed.config) or _reads_kv_outside(run)
            or not run.backend.run_covers(witnessed, source.witness, run)):
        return None
    copy = dict(summary)
    copy["num_gpu_blocks"] = {name: role.scheduler.kv_blocks for name, role in run.roles.items()}
    copy["config_hash"] = config_hash(run.config)
    copy["workers"] = [{**worker, **kv_utilization(weighted, peak, source.sim_ns,
                                                   run.roles[worker["role"]].scheduler.kv_blocks - 1)}
                       for worker, (weighted, peak) in zip(summary["workers"], source.kv_sums)]
    wall_s = time.perf_counter() - start
    copy["wall_time_ms"] = wall_s * 1e3
    return {"status": "ok", "summary": copy, "error": None, "wall_time_s": wall_s}


def _outside_schedulers(config: Any) -> dict:
    """The resolved config as a dict, every role's scheduler left out (the backend compares those)."""
    dump = config.model_dump(mode="json")
    for role in (dump.get("engine", {}).get("workers") or {}).values():
        if isinstance(role, dict):
            role.pop("scheduler", None)
    return dump


def _reads_kv_outside(run: Any) -> bool:
    """Whether anything outside the engines reads their KV caches' use or contents."""
    return run.router.policy in _KV_READING_ROUTERS or any(role.autoscaling is not None for role in run.roles.values())
