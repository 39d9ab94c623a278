"""Trial results in SQLite, one row per trial, committed as each trial completes.

`trials` holds the trial's identity (id, rung, candidate, request budget, overrides as
JSON, `config_hash` of the trial's config as given), its outcome (`status`: ok, error or
lost; `error`; `wall_time_s`; `session`, the invocation that ran it), the whole summary
as JSON (per-worker KV timelines left out), and one column per scalar summary metric,
named as in summary.json (columns are added as metrics first appear; the summary's own
resolved-config hash is `resolved_config_hash`). `meta` records what the sweep was made
from, so `--resume` can refuse a different config or space.

A killed sweep loses at most the trials in flight: every finished trial is its own
committed transaction. `lost` trials (a worker process died) count as missing.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from servesim.errors import ServesimError

FILE_NAME = "trials.sqlite"
_FIXED = ("trial_id", "rung", "candidate", "max_requests", "overrides", "config_hash", "status", "error",
          "wall_time_s", "session", "summary_json")
_RENAMED = {"config_hash": "resolved_config_hash"}
DONE = ("ok", "error")


def metric_columns(summary: dict) -> dict[str, Any]:
    """The summary's scalar metrics, by column name."""
    return {_RENAMED.get(k, k): v for k, v in summary.items()
            if v is None or isinstance(v, (int, float, str, bool))}


class TrialStore:
    def __init__(self, folder: Path) -> None:
        folder = Path(folder)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ServesimError(f"cannot create folder {folder}: {err.strerror}") from None
        self.path = folder / FILE_NAME
        try:
            self.db = sqlite3.connect(self.path)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            self.db.execute(
                "CREATE TABLE IF NOT EXISTS trials (trial_id INTEGER PRIMARY KEY, rung INTEGER NOT NULL, "
                "candidate INTEGER NOT NULL, max_requests INTEGER, overrides TEXT NOT NULL, config_hash TEXT "
                "NOT NULL, status TEXT NOT NULL, error TEXT, wall_time_s REAL, session INTEGER NOT NULL, "
                "summary_json TEXT)")
            self.db.commit()
        except sqlite3.DatabaseError as err:
            raise ServesimError(f"{self.path} is not a servesim sweep database ({err})") from None
        self.columns = [row[1] for row in self.db.execute("PRAGMA table_info(trials)")]
        self.session = 0

    def close(self) -> None:
        self.db.close()

    # ------------------------------------------------------------------ opening a sweep

    def begin(self, meta: dict[str, str], resume: bool) -> int:
        """Match (or record) what this sweep is made from; returns how many trials are done."""
        stored = dict(self.db.execute("SELECT key, value FROM meta"))
        done = self.db.execute("SELECT COUNT(*) FROM trials WHERE status IN ('ok', 'error')").fetchone()[0]
        if stored and not resume:
            raise ServesimError(f"{self.path.parent} already holds a sweep ({done} trials done); pass --resume "
                                "to continue it, or choose another --out")
        for key, value in meta.items():
            if key in stored and stored[key] != value:
                raise ServesimError(f"the sweep in {self.path.parent} was made from a different {key}; "
                                    "resume it with the same files, or choose another --out")
        self.db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta.items())
        last = self.db.execute("SELECT MAX(session) FROM trials").fetchone()[0]
        self.session = (last or 0) + 1
        self.db.commit()
        return done

    # ------------------------------------------------------------------ trials

    def record(self, trial, outcome: dict) -> dict:
        """Store one finished trial (its own transaction) and return its row."""
        summary = outcome.get("summary")
        values: dict[str, Any] = {
            "trial_id": trial.trial_id, "rung": trial.rung, "candidate": trial.candidate.index,
            "max_requests": trial.max_requests, "overrides": json.dumps(trial.overrides),
            "config_hash": trial.config_hash, "status": outcome["status"], "error": outcome.get("error"),
            "wall_time_s": outcome.get("wall_time_s"), "session": self.session,
            "summary_json": None if summary is None else json.dumps(summary),
        }
        if summary is not None:
            values.update(metric_columns(summary))
        for name in values:
            if name not in self.columns:
                quoted = name.replace('"', '""')
                self.db.execute(f'ALTER TABLE trials ADD COLUMN "{quoted}"')
                self.columns.append(name)
        names = ", ".join('"' + n.replace('"', '""') + '"' for n in values)
        marks = ", ".join("?" for _ in values)
        self.db.execute(f"INSERT OR REPLACE INTO trials ({names}) VALUES ({marks})",
                        [int(v) if isinstance(v, bool) else v for v in values.values()])
        self.db.commit()
        return self._row(values)

    @staticmethod
    def _row(values: dict) -> dict:
        summary = values.get("summary_json")
        return {**{k: values.get(k) for k in _FIXED if k != "summary_json"},
                "overrides": json.loads(values["overrides"]),
                "summary": None if summary is None else json.loads(summary)}

    def rows(self, done_only: bool = False) -> dict[int, dict]:
        """Stored trials by id (only ok and error ones when `done_only`)."""
        query = f"SELECT {', '.join(_FIXED)} FROM trials"
        if done_only:
            query += " WHERE status IN ('ok', 'error')"
        out = {}
        for record in self.db.execute(query + " ORDER BY trial_id"):
            values = dict(zip(_FIXED, record))
            out[values["trial_id"]] = self._row(values)
        return out

    def table(self) -> tuple[list[str], list[tuple]]:
        """Every column of every trial, by trial id (for trials.csv)."""
        cursor = self.db.execute("SELECT * FROM trials ORDER BY trial_id")
        return [d[0] for d in cursor.description], cursor.fetchall()
