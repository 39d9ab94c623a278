"""The configs a sweep folder's trials ran, for `servesim deploy SWEEP_DIR --trial N | --pareto`.

Read from its trials.sqlite (sweep/store.py) without writing to it: the base config the sweep
recorded and each trial's overrides. The Pareto trials are those of the last rung (the whole
workload) on the frontier of output throughput per GPU against tokens per second per user, as
the sweep's pareto.png draws it (sweep/report.py).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from servesim.errors import ServesimError
from servesim.sweep.objective import derived_metrics, pareto_frontier
from servesim.sweep.store import FILE_NAME
from servesim.sweep.trials import apply_overrides


def sweep_trial_configs(folder: Path, trial: int | None, pareto: bool) -> list[tuple[int, dict]]:
    """(trial id, config) of the trial asked for, or of every Pareto trial."""
    if (trial is None) == (not pareto):
        raise ServesimError("give a sweep folder either --trial N or --pareto")
    base, rows = _read(Path(folder))
    if trial is not None:
        row = rows.get(trial)
        if row is None:
            raise ServesimError(f"{folder} has no trial {trial} (trials {min(rows)}-{max(rows)})" if rows
                                else f"{folder} has no trials yet")
        if row["status"] != "ok":
            raise ServesimError(f"trial {trial} of {folder} did not run ({row['status']}): nothing to deploy")
        return [(trial, _config(base, row))]
    final = max((r["rung"] for r in rows.values()), default=0)
    points = []
    for row in rows.values():
        if row["rung"] != final or row["status"] != "ok":
            continue
        d = derived_metrics(row["summary"])
        if d["tok_s_per_user"] is not None and d["throughput_per_gpu"] is not None:
            points.append((row["trial_id"], d["tok_s_per_user"], d["throughput_per_gpu"]))
    frontier = pareto_frontier(points)
    if not frontier:
        raise ServesimError(f"{folder} has no finished trial on the whole workload: no Pareto frontier yet")
    return [(tid, _config(base, rows[tid])) for tid in frontier]


def _read(folder: Path) -> tuple[dict, dict[int, dict]]:
    path = folder / FILE_NAME
    if not path.is_file():
        raise ServesimError(f"{folder} is neither a config file nor a sweep folder (it has no {FILE_NAME})")
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            meta = dict(db.execute("SELECT key, value FROM meta"))
            records = db.execute("SELECT trial_id, rung, status, overrides, summary_json FROM trials").fetchall()
        finally:
            db.close()
    except sqlite3.DatabaseError as err:
        raise ServesimError(f"{path} is not a servesim sweep database ({err})") from None
    if "config" not in meta:
        raise ServesimError(f"{path} records no base config (a sweep that never started)")
    rows = {tid: {"trial_id": tid, "rung": rung, "status": status, "overrides": json.loads(overrides),
                  "summary": json.loads(summary) if summary else None}
            for tid, rung, status, overrides, summary in records}
    return json.loads(meta["config"]), rows


def _config(base: dict, row: dict) -> dict:
    return apply_overrides(base, [tuple(o) for o in row["overrides"]])
