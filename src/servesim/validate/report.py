"""`servesim validate`'s table and files: comparison.json/.csv, CDF, scatter and sweep plots.

One run prints every figure (measured, predicted, signed error); several runs print one row
each with the headline figures, and comparison.json holds every figure of every run.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np

from servesim.validate.compare import FIGURES, Comparison

HEADLINE = ("mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "mean_e2e_ms", "output_throughput")
_UNITS = {"request_throughput": "req/s", "output_throughput": "tok/s", "total_token_throughput": "tok/s",
          "duration_s": "s"}


def _label(name: str) -> str:
    if name in _UNITS:
        return f"{name} ({_UNITS[name]})"
    stat, metric, _ = name.split("_")
    return f"{stat} {metric.upper()} (ms)"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def format_table(comparisons: list[Comparison]) -> str:
    """The printed comparison: every figure of one run, or one row per run."""
    if len(comparisons) == 1:
        c = comparisons[0]
        rows = [("figure", "measured", "predicted", "error")]
        rows += [(_label(name), _num(f["measured"]), _num(f["predicted"]), _pct(f["error_pct"]))
                 for name, f in c.figures.items()]
        title = f"{c.measured.label} ({c.measured.tool}, {c.measured.num_requests} requests)"
        return title + "\n" + _grid(rows)
    header = ("run", "concurrency") + tuple(f"{_short(n)} err" for n in HEADLINE)
    rows = [header]
    for c in comparisons:
        conc = c.measured.concurrency
        cells = [_pct(c.figures[n]["error_pct"]) if n in c.figures else "-" for n in HEADLINE]
        rows.append((c.measured.label, "-" if conc is None else f"{conc:g}", *cells))
    return _grid(rows)


def _short(name: str) -> str:
    return {"output_throughput": "tok/s"}.get(name, name.replace("_ms", "").replace("_", " "))


def _grid(rows: list[tuple]) -> str:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        cells = [str(cell).ljust(w) if i == 0 else str(cell).rjust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"


def comparison_data(comparisons: list[Comparison], config: str) -> dict:
    return {"config": config, "runs": [{
        "label": c.measured.label, "file": str(c.measured.path), "tool": c.measured.tool,
        "requests": c.measured.num_requests, "failed": c.measured.failed,
        "concurrency": c.measured.concurrency, "figures": c.figures, "warnings": c.warnings,
        "max_abs_error_pct": c.max_abs_error()} for c in comparisons]}


def comparison_csv(comparisons: list[Comparison]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["run", "tool", "figure", "measured", "predicted", "error_pct"])
    for c in comparisons:
        for name in FIGURES:
            f = c.figures.get(name)
            if f is not None:
                writer.writerow([c.measured.label, c.measured.tool, name, _cell(f["measured"]),
                                 _cell(f["predicted"]), _cell(f["error_pct"])])
    return out.getvalue()


def _cell(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def _safe(label: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in label)


def write_outputs(comparisons: list[Comparison], out: Path, files, config: str) -> list[str]:
    """comparison.json, comparison.csv, plots, and each run's own files under runs/<label>/."""
    from servesim.metrics.output import write_json

    names = ["comparison.json", "comparison.csv"]
    write_json(files.path_for(out / "comparison.json"), comparison_data(comparisons, config))
    files.path_for(out / "comparison.csv").write_text(comparison_csv(comparisons), encoding="utf-8")
    for c in comparisons:
        folder = out / "runs" / _safe(c.measured.label)
        write_json(files.path_for(folder / "summary.json"), c.result.summary)
        with open(files.path_for(folder / "requests.csv"), "w", encoding="utf-8", newline="") as fh:
            c.result.requests.write_csv(fh)
        with open(files.path_for(folder / "result.json"), "w", encoding="utf-8") as fh:
            json.dump(c.result_json, fh)
        names += _plot_run(c, folder, files)
    if len(comparisons) > 1:
        path = out / "concurrency.png"
        if _plot_sweep(comparisons, files.path_for(path)):
            names.append(path.name)
    return names


def _samples(run, metric: str) -> np.ndarray | None:
    if metric == "ttft":
        return None if run.ttfts is None else np.asarray(run.ttfts, dtype=float) * 1e3
    if run.itls is None:
        return None
    return np.asarray([g for gaps in run.itls for g in gaps], dtype=float) * 1e3


def _plot_run(c: Comparison, folder: Path, files) -> list[str]:
    """Measured-vs-predicted CDFs of TTFT and ITL, and per-request TTFT scatter when detailed."""
    from servesim.metrics.plots import _figure, cdf

    written = []
    for metric in ("ttft", "itl"):
        measured, predicted = _samples(c.measured, metric), _samples(c.predicted, metric)
        if measured is None or measured.size == 0:
            continue
        fig, (ax,) = _figure()
        for values, name, style in ((measured, "measured", "-"), (predicted, "predicted", "--")):
            x, y = cdf(values)
            ax.step(x, y, where="post", linestyle=style, label=f"{name} ({x.size:,})")
        ax.set_title(f"{metric.upper()}: measured vs servesim, {c.measured.label}", fontsize=11)
        ax.set_xlabel(f"{metric.upper()} (ms)")
        ax.set_ylabel("fraction")
        ax.legend(loc="lower right", fontsize=9)
        path = folder / f"{metric}_cdf.png"
        fig.savefig(files.path_for(path))
        written.append(f"runs/{folder.name}/{path.name}")
    if c.measured.detailed and c.measured.failed == 0 and len(c.measured.ttfts) == len(c.predicted.ttfts or []):
        fig, (ax,) = _figure(5.0, 5.0)
        m = np.asarray(c.measured.ttfts) * 1e3
        p = np.asarray(c.predicted.ttfts) * 1e3
        ax.scatter(m, p, s=8)
        top = float(max(m.max(), p.max())) if m.size else 1.0
        ax.plot([0, top], [0, top], color="#888888", linewidth=1)
        ax.set_xlabel("measured TTFT (ms)")
        ax.set_ylabel("predicted TTFT (ms)")
        ax.set_title(f"per-request TTFT, {c.measured.label}", fontsize=11)
        path = folder / "ttft_scatter.png"
        fig.savefig(files.path_for(path))
        written.append(f"runs/{folder.name}/{path.name}")
    return written


def _plot_sweep(comparisons: list[Comparison], path: Path) -> bool:
    """Measured and predicted mean TTFT, mean TPOT and output throughput against concurrency."""
    from servesim.metrics.plots import _figure

    points = [c for c in comparisons if c.measured.concurrency is not None]
    if len(points) < 2:
        return False
    points.sort(key=lambda c: c.measured.concurrency)
    fig, axes = _figure(7.0, 8.0, rows=3)
    x = [c.measured.concurrency for c in points]
    for ax, name in zip(axes, ("mean_ttft_ms", "mean_tpot_ms", "output_throughput")):
        for side, style in (("measured", "o-"), ("predicted", "s--")):
            ax.plot(x, [c.figures.get(name, {}).get(side) for c in points], style, label=side)
        ax.set_ylabel(_label(name))
        ax.legend(fontsize=8)
    axes[-1].set_xlabel("max concurrency")
    axes[0].set_title("measured vs servesim over the sweep", fontsize=11)
    fig.savefig(path)
    return True
