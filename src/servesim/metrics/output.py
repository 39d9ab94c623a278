"""Writing a run's files atomically: everything lands under its final name, or nothing does.

An `--out` folder is staged whole (`AtomicFiles.stage_folder`): the run writes into a
fresh `.<name>.servesim-staging-<pid>-*` folder beside it, which replaces the old folder
only once everything is written, so files of an earlier run (plots, a pass log, worker
timelines) never sit beside new results. Only a folder that is empty or carries servesim's
marker file `.servesim-output` is ever replaced; the current folder (or one above it)
never is. Staging and replaced folders a killed run left behind are removed by the next
run into the same folder, once their process is gone.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from servesim.errors import ServesimError

MARKER = ".servesim-output"
# What servesim versions before the marker wrote into --out: such a folder is servesim's too.
_LEGACY_NAMES = {"summary.json", "requests.csv", "workers.csv", "config.resolved.yaml", "result.json",
                 "ttft_cdf.png", "tpot_cdf.png"}


def _is_legacy_output(folder: Path) -> bool:
    names = {p.name for p in folder.iterdir()}
    return "summary.json" in names and all(n in _LEGACY_NAMES or (n.startswith("timeline_") and n.endswith(".png"))
                                           for n in names)


def check_replaceable(folder: Path, label: str = "--out") -> None:
    """Refuse a folder servesim must not replace: a file, the working folder, or a folder of someone else's files."""
    if folder.exists() and not folder.is_dir():
        raise ServesimError(f"{label} {folder} exists and is not a folder")
    cwd = Path.cwd().resolve()
    if folder == cwd or folder in cwd.parents:
        raise ServesimError(f"{label} {folder} is the current folder or holds it; servesim replaces the {label} "
                            "folder whole, so give it a folder of its own (e.g. --out results)")
    if folder.is_dir() and any(folder.iterdir()) and not (folder / MARKER).is_file() \
            and not _is_legacy_output(folder):
        raise ServesimError(f"{label} {folder} holds files servesim did not write (it has no {MARKER} marker); "
                            "servesim replaces that folder whole, so give an empty or new folder")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_leftovers(folder: Path) -> None:
    """Remove staging and replaced copies of `folder` that dead servesim runs left beside it."""
    for sibling in folder.parent.glob(f".{folder.name}.servesim-*"):
        parts = sibling.name[len(folder.name) + 2:].split("-")   # servesim, staging|old, pid, random
        if len(parts) < 4 or parts[1] not in ("staging", "old") or not parts[2].isdigit():
            continue
        pid = int(parts[2])
        if sibling.is_dir() and (sibling / MARKER).is_file() and pid != os.getpid() and not _pid_alive(pid):
            shutil.rmtree(sibling, ignore_errors=True)


def _folder_mode() -> int:
    """The mode `mkdir` gives a new folder under the process's umask."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o777 & ~umask


def _make_folder(folder: Path) -> Path | None:
    """Create `folder` and its missing parents; returns the top-most folder created (None if none)."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ServesimError(f"cannot create folder {folder}: {err.strerror}") from None
    return missing[-1] if missing else None


class AtomicFiles:
    """Collects files in scratch folders beside their destination, then renames them into place.

    On any failure the scratch folders are removed and nothing under the final
    names has changed (a folder created for the run is removed too).
    """

    def __init__(self) -> None:
        self._pending: list[tuple[Path, Path]] = []   # (scratch file, final path)
        self._scratch_dirs: list[Path] = []
        self._created_dirs: list[Path] = []
        self._staged: dict[Path, Path] = {}          # final folder -> its staging folder
        self._finals: set[Path] = set()

    def stage_folder(self, folder: Path, label: str = "--out") -> None:
        """Write everything under `folder` into a staging folder that replaces it whole at commit."""
        folder = Path(folder).resolve()
        check_replaceable(folder, label)
        created = _make_folder(folder.parent)
        if created is not None:
            self._created_dirs.append(created)
        clean_leftovers(folder)
        try:
            staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.servesim-staging-{os.getpid()}-",
                                            dir=folder.parent))
        except OSError as err:
            raise ServesimError(f"cannot write in {folder.parent}: {err.strerror}") from None
        staging.chmod(_folder_mode())   # mkdtemp's 0700 would make the swapped-in --out private
        (staging / MARKER).write_text("written by servesim: the next run with this --out replaces this folder "
                                      "whole\n", encoding="utf-8")
        self._scratch_dirs.append(staging)
        self._staged[folder] = staging

    def protect(self, inputs: list) -> None:
        """Refuse to replace a staged folder holding one of the run's inputs (its config, its trace)."""
        for path in inputs:
            if path is None:
                continue
            path = Path(path).resolve()
            for folder in self._staged:
                if path.is_relative_to(folder):
                    raise ServesimError(f"--out {folder} holds {path}, an input of this run; servesim replaces the "
                                        "--out folder whole, so give another folder")

    def is_pending(self, final: Path) -> bool:
        return Path(final).resolve() in self._finals

    def path_for(self, final: Path) -> Path:
        final = Path(final).resolve()
        if final in self._finals:
            raise ServesimError(f"{final} would be written twice by this run")
        self._finals.add(final)
        for folder, staging in self._staged.items():
            if final.is_relative_to(folder):
                path = staging / final.relative_to(folder)
                path.parent.mkdir(parents=True, exist_ok=True)
                return path
        parent = final.parent
        if not parent.exists():
            created = _make_folder(parent)
            if created is not None:
                self._created_dirs.append(created)
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
        for folder in self._staged:
            check_replaceable(folder)   # again: the folder may have changed during the run
        for folder, staging in self._staged.items():
            self._swap_in(folder, staging)
        for scratch, final in self._pending:
            os.replace(scratch, final)
        self._staged = {}
        self._cleanup_scratch()

    @staticmethod
    def _swap_in(folder: Path, staging: Path) -> None:
        old = None
        if folder.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{folder.name}.servesim-old-{os.getpid()}-", dir=folder.parent))
            (old / MARKER).write_text("", encoding="utf-8")   # lets a later run remove it if this one dies
            os.replace(folder, old / folder.name)
        os.rename(staging, folder)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def abort(self) -> None:
        self._cleanup_scratch()
        self._staged = {}
        for folder in reversed(self._created_dirs):
            shutil.rmtree(folder, ignore_errors=True)

    def _cleanup_scratch(self) -> None:
        for scratch in self._scratch_dirs:
            shutil.rmtree(scratch, ignore_errors=True)
        self._scratch_dirs = []


def claim_sweep_folder(folder: Path) -> None:
    """A sweep's --out: new, empty, or a sweep servesim wrote (trials.sqlite, or the marker), never someone's files.

    Sweeps keep trials.sqlite for --resume, so their folder is not replaced whole; this
    check is what keeps trials.csv, pareto.png and best.yaml from overwriting a user's files.
    It writes nothing: the sweep's own trials.sqlite marks the folder from then on.
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ServesimError(f"--out {folder} exists and is not a folder")
    if folder.is_dir() and any(folder.iterdir()) and not (folder / MARKER).is_file() \
            and not (folder / "trials.sqlite").is_file():
        raise ServesimError(f"--out {folder} holds files servesim did not write (no {MARKER} marker, no "
                            "trials.sqlite); give an empty or new folder for the sweep")


def check_passes_target(passes: Path, protected: list, files: AtomicFiles | None = None) -> None:
    """`--passes FILE` must not replace an input of the run (config, trace) nor a file it writes (in `files`)."""
    passes = Path(passes)
    if passes.is_dir():
        raise ServesimError(f"--passes {passes} is a folder; give a file name")
    if files is not None and files.is_pending(passes):
        raise ServesimError(f"--passes {passes} is a file this run writes into --out; choose another name")
    target = passes.resolve()
    for path in protected:
        if path is not None and (Path(path).resolve() == target
                                 or (passes.exists() and Path(path).exists() and os.path.samefile(path, passes))):
            raise ServesimError(f"--passes {passes} is an input of this run ({path}); choose another file name")


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
