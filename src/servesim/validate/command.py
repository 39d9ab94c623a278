"""`servesim validate RESULT... --config DEPLOYMENT.yaml [--fail-above PCT] [--out DIR]`."""

from __future__ import annotations

import sys
from pathlib import Path

from servesim.errors import ServesimError

# Exit status when --fail-above is exceeded (2 stays bad input).
FAILED_CHECK = 1


class _Progress:
    """A rich bar over the runs, shown only on a terminal."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._bar = None
        self._task = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self._bar is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self._bar = Progress(TextColumn("validating"), BarColumn(), MofNCompleteColumn(), transient=True)
            self._bar.start()
            self._task = self._bar.add_task("runs", total=total)
        self._bar.update(self._task, completed=done)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def check_fail_above(value: float | None) -> None:
    if value is not None and not value >= 0:
        raise ServesimError(f"--fail-above must be a percentage of at least 0, got {value:g}")


def run_validate(results: list[Path], config: Path, fail_above: float | None, out: Path | None,
                 quiet: bool) -> int:
    """Compare, print, write; the exit status (0, or 1 when an error exceeds --fail-above)."""
    from servesim.metrics.output import AtomicFiles
    from servesim.validate.compare import compare_files
    from servesim.validate.report import format_table, write_outputs

    check_fail_above(fail_above)
    if not config.is_file():
        raise ServesimError(f"--config {config} " + ("is a folder, not a file" if config.is_dir()
                                                     else "does not exist"))
    files = AtomicFiles()
    progress = _Progress(enabled=not quiet and sys.stderr.isatty())
    try:
        if out is not None:
            files.stage_folder(out)
            files.protect([config, *results])   # --out must not hold what it reads
        comparisons = compare_files(results, config, progress)
        progress.close()
        written = write_outputs(comparisons, out, files, str(config)) if out is not None else []
        files.commit()
    except BaseException:
        progress.close()
        files.abort()
        raise
    for c in comparisons:
        for note in c.warnings:
            sys.stderr.write(f"warning: {note}\n")
    if not quiet:
        sys.stdout.write(format_table(comparisons))
        if written:
            plots = len(written) - 2
            what = "run's" if len(comparisons) == 1 else "runs'"
            sys.stdout.write(f"wrote {str(out).rstrip('/')}/: comparison.json, comparison.csv"
                             + (f", {plots} plot{'s' * (plots != 1)}" if plots else "")
                             + f" and the simulated {what} files under runs/\n")
    if fail_above is None:
        return 0
    worst = [(c.max_abs_error(), c.measured.label) for c in comparisons if c.max_abs_error() is not None]
    over = [(e, label) for e, label in worst if e > fail_above]
    if over:
        error, label = max(over)
        sys.stderr.write(f"error: {label}: a figure is off by {error:.1f}%, above --fail-above {fail_above:g}%\n")
        return FAILED_CHECK
    return 0
