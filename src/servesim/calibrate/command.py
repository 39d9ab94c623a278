"""`servesim calibrate RESULT... --config D.yaml --out PROFILE.yaml [--params ...] [--evals N] [--waves W]`.

Cost, stated before it starts: the fit runs at most `evals` evaluations of every file; with two
or more files, each file's leave-one-out refit runs at most `evals // 2` evaluations of the
others plus one prediction of it, so the simulations are bounded by
files × evals + files × ((files − 1) × evals // 2 + 2), each of `waves` waves per file.
"""

from __future__ import annotations

import sys
from pathlib import Path

from servesim.errors import ServesimError


class _Bar:
    def __init__(self, enabled: bool, total: int) -> None:
        self.enabled, self.total, self.done = enabled, total, 0
        self._bar = self._task = None

    def __call__(self) -> None:
        self.done += 1
        if not self.enabled:
            return
        if self._bar is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("calibrating"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("simulations"), TimeElapsedColumn(), transient=True)
            self._bar.start()
            self._task = self._bar.add_task("fit", total=self.total)
        self._bar.update(self._task, completed=min(self.done, self.total))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def budget(files: int, evals: int) -> int:
    loo = files * ((files - 1) * (evals // 2) + 2) if files >= 2 else 0
    return files * evals + loo


def _check_options(evals: int, waves: int, out: Path, results: list[Path]) -> None:
    if evals < 2:
        raise ServesimError(f"--evals must be at least 2, got {evals}")
    if not 1 <= waves <= 20:
        raise ServesimError(f"--waves must be between 1 and 20, got {waves}")
    if out.suffix not in (".yaml", ".yml"):
        raise ServesimError(f"--out {out} must name a .yaml file (the profile engine.timing.profile_file reads)")
    if out.is_dir():
        raise ServesimError(f"--out {out} is a folder; give the profile's file name")
    if any(out.resolve() == Path(r).resolve() for r in results):
        raise ServesimError(f"--out {out} is one of the result files; give the profile another name")


def run_calibrate(results: list[Path], config: Path, out: Path, params: str | None, evals: int, waves: int,
                  quiet: bool) -> None:
    from servesim.calibrate.constraints import check_consistent, free_parameters
    from servesim.calibrate.fit import Evaluator, base_parameters, fit, prepare, scratch_dir
    from servesim.calibrate.report import leave_one_out, print_report, write_profile
    from servesim.validate.readers import read_results

    _check_options(evals, waves, out, results)
    if not config.is_file():
        raise ServesimError(f"--config {config} " + ("is a folder, not a file" if config.is_dir()
                                                     else "does not exist"))
    runs = [run for path in results for run in read_results(Path(path))]
    base, base_key, cfg = base_parameters(config)
    check_consistent(runs, cfg)
    asked = [p.strip() for p in params.split(",") if p.strip()] if params else None
    free, unconstrained = free_parameters(runs, cfg, asked)
    total = budget(len(runs), evals)
    if not quiet:
        sys.stdout.write(f"calibrating {', '.join(free)} on {len(runs)} runs from {base_key}: at most "
                         f"{total:,} simulations of {waves} waves each\n")
    bar = _Bar(not quiet and sys.stderr.isatty(), total)
    try:
        with scratch_dir() as tmp:
            fit_runs = prepare(runs, Path(tmp), waves)
            evaluator = Evaluator(config, bar)
            result = fit(fit_runs, base, free, evals, evaluator)
            rows = leave_one_out(fit_runs, base, free, evals // 2, evaluator, result)
    finally:
        bar.close()
    write_profile(out, cfg, base_key, result, free, unconstrained, results, rows, evaluator.simulations)
    if not quiet:
        print_report(rows, result, free, unconstrained, base, evaluator.simulations, out)
