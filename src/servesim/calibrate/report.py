"""calibrate's leave-one-out rows, its printed report and the PROFILE.yaml it writes."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from servesim.calibrate.fit import Evaluator, Fit, FitRun, fit, signed_pct


@dataclass
class LooRow:
    label: str
    before: tuple[float | None, float | None]    # TTFT, TPOT error % at the shipped profile
    after: tuple[float | None, float | None]     # at the profile fitted without this file
    fitted: tuple[float | None, float | None]    # at the profile fitted on every file


def _errors(run: FitRun, predicted) -> tuple[float | None, float | None]:
    if predicted is None:
        return None, None
    return signed_pct(predicted[0], run.ttft_ms), signed_pct(predicted[1], run.tpot_ms)


def leave_one_out(runs: list[FitRun], base: dict, free: list[str], evals: int, evaluator: Evaluator,
                  full: Fit) -> list[LooRow]:
    """Each file predicted by the shipped profile, by a fit on the other files, and by the full fit.

    With one file there is nothing to leave out: `after` is the full fit's own (in-sample) error."""
    rows = []
    for index, run in enumerate(runs):
        before = _errors(run, evaluator.predict(run, base))
        fitted = _errors(run, evaluator.predict(run, full.params))
        others = runs[:index] + runs[index + 1:]
        if others and evals >= 2:
            held_out = fit(others, base, free, evals, evaluator).params
            after = _errors(run, evaluator.predict(run, held_out))
        else:
            after = fitted
        rows.append(LooRow(run.measured.label, before, after, fitted))
    return rows


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def print_report(rows: list[LooRow], result: Fit, free: list[str], unconstrained: dict[str, str], base: dict,
                 simulations: int, out: Path) -> None:
    from servesim.validate.report import _grid

    table = [("run", "TTFT before", "TTFT left out", "TPOT before", "TPOT left out")]
    table += [(r.label, _pct(r.before[0]), _pct(r.after[0]), _pct(r.before[1]), _pct(r.after[1])) for r in rows]
    lines = [f"loss {result.loss_start:.4f} -> {result.loss_fitted:.4f} ({simulations:,} simulations)", "",
             "parameter                 shipped     fitted"]
    for name in free:
        lines.append(f"{name:<24}  {base[name]:>8.4g}  {result.params[name]:>9.4g}")
    for name, why in unconstrained.items():
        lines.append(f"{name:<24}  {base[name]:>8.4g}  (kept: {why})")
    sys.stdout.write("\n".join(lines) + "\n\nerror per run: before (shipped profile) and left out "
                     "(fitted on the other runs)\n" + _grid(table) + f"wrote {out}\n")


def write_profile(out: Path, cfg, base_key: str, result: Fit, free: list[str], unconstrained: dict[str, str],
                  files: list[Path], rows: list[LooRow], simulations: int) -> None:
    from servesim.calibrate.profile_file import profile_document
    from servesim.engine.registry import get_backend
    from servesim.hardware import resolve_gpu
    from servesim.metrics.output import AtomicFiles
    from servesim.timing.roofline import RooflineProfile
    from servesim.yaml_io import dump_yaml

    report = {"loss_shipped": round(result.loss_start, 6), "loss_fitted": round(result.loss_fitted, 6),
              "simulations": simulations,
              "runs": [{"run": r.label, "ttft_error_pct": {"shipped": r.before[0], "left_out": r.after[0],
                                                            "fitted": r.fitted[0]},
                        "tpot_error_pct": {"shipped": r.before[1], "left_out": r.after[1], "fitted": r.fitted[1]}}
                       for r in rows]}
    document = profile_document(resolve_gpu(cfg.gpu).name, get_backend(cfg.engine.backend).timing_profile, base_key,
                                RooflineProfile.from_dict(result.params), free,
                                [f"{p}: {why}" for p, why in unconstrained.items()],
                                [str(f) for f in files], report)
    files_out = AtomicFiles()
    try:
        files_out.path_for(out).write_text("# servesim calibrate profile: engine.timing: {kind: roofline, "
                                           f"profile_file: {out.name}}}\n" + dump_yaml(document), encoding="utf-8")
        files_out.commit()
    except BaseException:
        files_out.abort()
        raise
