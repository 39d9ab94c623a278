"""Simulate each measured run and pair every measured figure with its prediction.

The prediction goes through the same reader as the measurement: the simulated run is written
as the result.json `vllm bench serve` would have written for it (metrics/vllm_result.py,
detailed, percentiles 50, 90, 99) and read back by readers/vllm.py, so both sides of each
figure are computed the same way. A signed error is (predicted − measured) / measured, in
percent; a figure the file lacks (or whose measured value is 0) is not compared.
"""

from __future__ import annotations

import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servesim.errors import ServesimError
from servesim.validate.measured import METRICS, RATES, STATS, MeasuredRun
from servesim.validate.rebuild import workload_overrides

PERCENTILES = (50.0, 90.0, 99.0)
# (figure name, how to read it from a MeasuredRun)
FIGURES: tuple[str, ...] = tuple(f"{stat}_{metric}_ms" for metric in METRICS for stat in STATS) + RATES + (
    "duration_s",)


def figure_value(run: MeasuredRun, name: str) -> float | None:
    if name == "duration_s":
        return run.duration_s
    if name in RATES:
        return run.rates.get(name)
    stat, metric, _ = name.split("_")
    return run.figure(metric, stat)


def signed_error(measured: float | None, predicted: float | None) -> float | None:
    if measured is None or predicted is None or measured == 0:
        return None
    return (predicted - measured) / measured * 100.0


@dataclass
class Comparison:
    """One row: a measured run, its prediction, and the simulation behind it."""

    measured: MeasuredRun
    predicted: MeasuredRun
    result: Any                                   # servesim.run.Result of the simulation
    figures: dict[str, dict[str, float | None]] = field(default_factory=dict)   # name -> measured/predicted/error
    warnings: list[str] = field(default_factory=list)
    result_json: dict | None = None               # the prediction as vllm bench serve's result.json

    def max_abs_error(self) -> float | None:
        errors = [abs(f["error_pct"]) for f in self.figures.values() if f["error_pct"] is not None]
        return max(errors) if errors else None


def _model_mismatch(run: MeasuredRun, config) -> str | None:
    if not run.model:
        return None
    from servesim.models import resolve_model

    try:
        named = resolve_model(run.model).name
    except ServesimError:
        named = None
    simulated = resolve_model(config.model).name
    if named == simulated:
        return None
    return (f"{run.label} was measured on model {run.model!r} but --config simulates {config.model!r}; "
            "the comparison is of different models")


def run_warnings(run: MeasuredRun, config) -> list[str]:
    out = []
    mismatch = _model_mismatch(run, config)
    if mismatch:
        out.append(mismatch)
    if run.engine is not None and run.engine != config.engine.backend:
        out.append(f"{run.label} was measured on engine {run.engine} but --config simulates "
                   f"{config.engine.backend}")
    if run.failed:
        out.append(f"{run.label}: {run.failed} of {run.num_requests} measured requests failed; their "
                   "figures leave them out, the simulation serves them all")
    out.extend(f"{run.label}: {note}" for note in run.notes)
    return out


def predict(run: MeasuredRun, config_path: Path, scratch: Path,
            extra_overrides: list[tuple[str, Any]] | None = None):
    """(the simulated run's Result, its prediction read back as a MeasuredRun)."""
    from servesim.metrics.vllm_result import build_result
    from servesim.run import simulate
    from servesim.validate.readers import vllm

    overrides = workload_overrides(run, scratch) + [("workload.warmup_requests", 0)] + list(extra_overrides or [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = simulate(config_path, overrides=overrides, percentiles=PERCENTILES, detailed=True)
    data = build_result(result.summary, result.requests, result.config, result.summary["simulated"]["model_id"],
                        PERCENTILES, result.token_times, save_detailed=True)
    predicted = vllm.read(data, Path(f"servesim prediction of {run.label}"), label=run.label)
    return result, predicted, data


def compare_run(run: MeasuredRun, config_path: Path, scratch: Path | None = None,
                extra_overrides: list[tuple[str, Any]] | None = None) -> Comparison:
    with tempfile.TemporaryDirectory(prefix="servesim-validate-") as tmp:
        result, predicted, data = predict(run, config_path, Path(scratch or tmp), extra_overrides=extra_overrides)
    comparison = Comparison(measured=run, predicted=predicted, result=result, result_json=data)
    for name in FIGURES:
        measured, guess = figure_value(run, name), figure_value(predicted, name)
        if measured is None:
            continue
        comparison.figures[name] = {"measured": measured, "predicted": guess,
                                    "error_pct": signed_error(measured, guess)}
    comparison.warnings = run_warnings(run, result.config)
    return comparison


def compare_files(paths: list[Path], config_path: Path, progress=None) -> list[Comparison]:
    """Every run of every file, in the order given (a file's runs in its own order)."""
    from servesim.validate.readers import read_results

    runs = [run for path in paths for run in read_results(Path(path))]
    seen: dict[str, int] = {}
    for run in runs:   # two files of one name (a sweep's folders): label each by its folder too
        seen[run.label] = seen.get(run.label, 0) + 1
    for run in runs:
        if seen[run.label] > 1:
            run.label = f"{run.path.parent.name}/{run.label}"
    out = []
    for index, run in enumerate(runs):
        out.append(compare_run(run, config_path))
        if progress is not None:
            progress(index + 1, len(runs))
    return out
