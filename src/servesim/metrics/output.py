"""Writing a run's files atomically: everything lands under its final name, or nothing does."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from servesim.errors import ServesimError


class AtomicFiles:
    """Collects files in a scratch folder beside their destination, then renames them into place.

    On any failure the scratch folder is removed and nothing under the final
    names has changed (a folder created for the run is removed too).
    """

    def __init__(self) -> None:
        self._pending: list[tuple[Path, Path]] = []   # (scratch file, final path)
        self._scratch_dirs: list[Path] = []
        self._created_dirs: list[Path] = []

    def path_for(self, final: Path) -> Path:
        final = Path(final)
        parent = final.parent
        if not parent.exists():
            try:
                parent.mkdir(parents=True)
            except OSError as err:
                raise ServesimError(f"cannot create folder {parent}: {err.strerror}") from None
            self._created_dirs.append(parent)
        elif not parent.is_dir():
            raise ServesimError(f"{parent} exists and is not a folder")
        try:
            scratch = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=parent))
        except OSError as err:
            raise ServesimError(f"cannot write in {parent}: {err.strerror}") from None
        self._scratch_dirs.append(scratch)
        path = scratch / final.name
        self._pending.append((path, final))
        return path

    def commit(self) -> None:
        for scratch, final in self._pending:
            if final.is_dir():
                raise ServesimError(f"{final} is a folder; cannot write a file there")
        for scratch, final in self._pending:
            os.replace(scratch, final)
        self._cleanup_scratch()

    def abort(self) -> None:
        self._cleanup_scratch()
        for folder in reversed(self._created_dirs):
            shutil.rmtree(folder, ignore_errors=True)

    def _cleanup_scratch(self) -> None:
        for scratch in self._scratch_dirs:
            shutil.rmtree(scratch, ignore_errors=True)
        self._scratch_dirs = []


def write_json(path: Path, data: dict) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2)
        fh.write("\n")


WORKER_COLUMNS = ("worker", "role", "passes", "busy_fraction", "mean_batch_requests", "mean_tokens_per_pass",
                  "preemptions", "prefix_cache_hit_rate", "kv_utilization_mean", "kv_utilization_max")


def write_workers_csv(path: Path, workers: list[dict]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write(",".join(WORKER_COLUMNS) + "\n")
        for w in workers:
            fh.write(",".join("" if w[c] is None else (f"{w[c]:.6g}" if isinstance(w[c], float) else str(w[c]))
                              for c in WORKER_COLUMNS) + "\n")
