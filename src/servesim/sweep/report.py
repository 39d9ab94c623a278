"""What a sweep hands back: the ranked table, the recommendation in words, trials.csv,
the Pareto frontier (pareto.png) and the recommended config as a ready-to-run best.yaml.

Only last-rung trials (the whole workload) are ranked and plotted; earlier rungs of
successive halving ran on a prefix of it and appear in trials.csv only.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from servesim.metrics.output import AtomicFiles
from servesim.sweep.objective import OBJECTIVE_LABELS, derived_metrics, pareto_frontier, percentile_key
from servesim.sweep.runner import SweepResult
from servesim.sweep.table import RankedRow, print_ranked
from servesim.sweep.trials import apply_overrides
from servesim.yaml_io import dump_yaml


@dataclass
class Report:
    ranked: list[dict]            # last-rung trials, best first
    best: dict | None             # the best trial meeting the SLOs
    frontier: list[int]           # trial ids on the Pareto frontier, by increasing interactivity
    labels: dict[int, str]        # trial id -> fleet label


def final_config(result: SweepResult, row: dict) -> dict:
    """The config a last-rung trial ran (the base config with its candidate's overrides)."""
    candidate = result.plan.candidates[row["candidate"]]
    return apply_overrides(result.plan.base, candidate.overrides)


def build_report(result: SweepResult) -> Report:
    rows = result.final_rows()
    ranked = result.judge.ranked(rows)
    best = ranked[0] if ranked and result.judge.meets(ranked[0]) else None
    plan = result.plan
    labels = {row["trial_id"]: plan.label(plan.candidates[row["candidate"]]) for row in rows}
    return Report(ranked, best, pareto_frontier(_points(rows)), labels)


def _points(rows: list[dict]) -> list[tuple[int, float, float]]:
    out = []
    for row in rows:
        if row["status"] != "ok":
            continue
        d = derived_metrics(row["summary"])
        if d["tok_s_per_user"] is not None and d["throughput_per_gpu"] is not None:
            out.append((row["trial_id"], d["tok_s_per_user"], d["throughput_per_gpu"]))
    return out


# --------------------------------------------------------------------------- files


def write_outputs(result: SweepResult, report: Report, out: Path, title: str,
                  extra_files: dict[str, str] | None = None) -> list[Path]:
    """trials.csv, pareto.png, (when a trial meets the SLOs) best.yaml and `extra_files`, atomically."""
    from servesim.metrics.plots import plot_pareto

    files = AtomicFiles()
    written = [out / "trials.csv", out / "pareto.png"]
    try:
        _write_trials_csv(result, files.path_for(out / "trials.csv"))
        judge = result.judge
        points = [{"trial_id": tid, "x": x, "y": y, "ok": judge.meets(result.rows[tid]),
                   "label": f"{report.labels[tid]}, {_gpus(result.rows[tid]['summary']['gpus'])}"}
                  for tid, x, y in _points(result.final_rows())]
        tpot = judge.slo.tpot_ms
        plot_pareto(points, report.frontier, files.path_for(out / "pareto.png"), title,
                    min_interactivity=1e3 / tpot if tpot else None,
                    best=report.best["trial_id"] if report.best else None)
        if report.best is not None:
            files.path_for(out / "best.yaml").write_text(best_yaml(result, report.best, report))
            written.append(out / "best.yaml")
        for name, text in (extra_files or {}).items():
            files.path_for(out / name).write_text(text)
            written.append(out / name)
        files.commit()
    except BaseException:
        files.abort()
        raise
    return written


def _write_trials_csv(result: SweepResult, path: Path) -> None:
    names, records = result.store.table()
    keep = [i for i, n in enumerate(names) if n != "summary_json"]
    judge = result.judge
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["trial_id", "meets_slo", "fleet", "params", "goodput_per_gpu", "throughput_per_gpu",
                         "tok_s_per_user"] + [names[i] for i in keep if names[i] != "trial_id"])
        for record in records:
            trial_id = record[0]
            row = result.rows.get(trial_id)
            candidate = result.plan.candidates[record[names.index("candidate")]]
            derived = derived_metrics(row["summary"]) if row and row["summary"] else {}
            writer.writerow([trial_id, int(judge.meets(row)) if row else "",
                             result.plan.label(candidate),
                             result.plan.describe(candidate)]
                            + ["" if derived.get(k) is None else f"{derived[k]:.6g}"
                               for k in ("goodput_per_gpu", "throughput_per_gpu", "tok_s_per_user")]
                            + ["" if record[i] is None else record[i] for i in keep if names[i] != "trial_id"])


def best_yaml(result: SweepResult, best: dict, report: Report) -> str:
    lines = [f"# servesim sweep recommendation: trial {best['trial_id']} of {result.store.path.parent}",
             *(f"# {line}" for line in explain(result, report)),
             "# Run it: servesim run best.yaml", ""]
    return "\n".join(lines) + dump_yaml(final_config(result, best))


# --------------------------------------------------------------------------- words


def _fmt(value, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _slo_text(result: SweepResult) -> str:
    return ", ".join(f"{label} <= {limit:g} ms" for _, label, limit in result.judge.targets()) or "none"


def explain(result: SweepResult, report: Report) -> list[str]:
    """The recommendation in a few plain sentences."""
    judge = result.judge
    rows = report.ranked
    meeting = [r for r in rows if judge.meets(r)]
    failed = sum(1 for r in rows if r["status"] != "ok")
    objective = OBJECTIVE_LABELS[judge.objective.kind]
    if report.best is None:
        out = [f"No configuration meets the SLOs ({_slo_text(result)}) among {len(rows)} run on the whole "
               "workload."]
        closest = next((r for r in rows if r["status"] == "ok"), None)
        if closest is not None:
            out.append(f"Closest: trial {closest['trial_id']}, {report.labels[closest['trial_id']]}: "
                       + "; ".join(judge.violations(closest)) + ".")
        return out
    best = report.best
    s = best["summary"]
    d = derived_metrics(s)
    params = result.plan.describe(result.plan.candidates[best["candidate"]])
    latency = ", ".join(f"{label} {_fmt(s.get(key), 0)} ms (SLO {limit:g})" for key, label, limit in judge.targets())
    out = [f"Recommended: trial {best['trial_id']}, {report.labels[best['trial_id']]} on {_gpus(s['gpus'])}"
           + (f", {params}" if params else "") + ".",
           f"In its own simulation of the whole workload it meets the SLOs: {latency}; "
           f"{s['completed']:,} requests served, {s['good_requests']:,} within every SLO.",
           f"It gives {_fmt(d['goodput_per_gpu'], 3)} req/s of goodput and {_fmt(d['throughput_per_gpu'], 0)} "
           f"output tok/s per GPU at {_fmt(d['tok_s_per_user'], 1)} tok/s per user; the best {objective} of "
           f"{len(meeting)} configurations meeting the SLOs, out of {len(rows)} run on the whole workload"
           + (f" ({failed} failed to run)" if failed else "") + "."]
    label = report.labels[best["trial_id"]]
    second = next((r for r in meeting if report.labels[r["trial_id"]] != label), None)
    if second is not None:
        d2 = derived_metrics(second["summary"])
        out.append(f"Best other fleet: trial {second['trial_id']}, {report.labels[second['trial_id']]} "
                   f"on {_gpus(second['summary']['gpus'])}, {_fmt(d2['goodput_per_gpu'], 3)} req/s goodput and "
                   f"{_fmt(d2['throughput_per_gpu'], 0)} output tok/s per GPU at {_fmt(d2['tok_s_per_user'], 1)} "
                   "tok/s per user.")
    return out


def _ranked_rows(result: SweepResult, report: Report, meeting: list[dict], top: int) -> list[RankedRow]:
    """The table's rows: the first `top` distinct figures, each with how many trials share them."""
    plan = result.plan
    pct = result.judge.slo.percentile
    ttft_key, tpot_key = percentile_key("ttft", pct), percentile_key("tpot", pct)
    shown: dict[tuple, list] = {}   # what a row displays -> [row, trials alike]
    for row in meeting:
        s = row["summary"]
        d = derived_metrics(s)
        figures = (report.labels[row["trial_id"]], str(s["gpus"]), _fmt(d["goodput_per_gpu"], 3),
                   _fmt(d["throughput_per_gpu"], 0), _fmt(d["tok_s_per_user"], 1), _fmt(s.get(ttft_key), 0),
                   _fmt(s.get(tpot_key), 1))
        if figures in shown:
            shown[figures][1] += 1
        elif len(shown) < top:
            params = plan.describe(plan.candidates[row["candidate"]])
            shown[figures] = [RankedRow(row["trial_id"], figures[0], params, figures[1:]), 0]
    for ranked, alike in shown.values():
        if alike:
            ranked.params += f" (+{alike} alike)"
    return [ranked for ranked, _ in shown.values()]


def print_report(result: SweepResult, report: Report, top: int = 10, console=None) -> None:
    from rich.console import Console

    import sys

    console = console or Console(highlight=False, width=None if sys.stdout.isatty() else 170)
    judge = result.judge
    pct = judge.slo.percentile
    plan = result.plan
    skipped = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in plan.skipped.items() if n)
    rungs = (f"; successive halving over {len(plan.budgets)} rungs "
             f"({' → '.join(str(n) for n in plan.sizes)} trials)" if len(plan.budgets) > 1 else "")
    console.print(f"{plan.total_trials} trials of {len(plan.candidates)} candidates"
                  + (f" ({skipped} set aside)" if skipped else "") + rungs
                  + f"; {result.ran} run now, {result.reused} found done.", style="dim")
    meeting = [r for r in report.ranked if judge.meets(r)]
    if meeting:
        title = (f"Best configurations meeting the SLOs ({_slo_text(result)}), by "
                 f"{OBJECTIVE_LABELS[judge.objective.kind]}")
        caption = ("goodput/GPU in req/s; tok/s/GPU: output tokens; latencies in ms; "
                   "+N alike: N more trials of that fleet with the same figures")
        print_ranked(console, _ranked_rows(result, report, meeting, top), pct, title, caption)
    frontier = ", ".join(f"{tid} ({report.labels[tid]})" for tid in report.frontier)
    console.print(f"Pareto frontier (throughput per GPU vs tok/s per user), by interactivity: {frontier or 'empty'}")
    for line in explain(result, report):
        console.print(line)
