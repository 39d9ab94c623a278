"""Figures of a run and of a sweep, drawn with matplotlib (imported here, lazily).

One idea per figure, axes labelled with units. Each function writes one PNG and
returns the data series it plotted, so tests (and users) can check the picture
against the run's records. Figures are built with `matplotlib.figure.Figure`
directly: no pyplot, no global state, no display needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from servesim.metrics.records import RequestTable

DPI = 110
_BLUE, _ORANGE, _GREEN, _GREY, _RED = "#1f77b4", "#ff7f0e", "#2ca02c", "#9a9a9a", "#d62728"


def _figure(width: float = 7.0, height: float = 4.2, rows: int = 1):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    axes = fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]
    for ax in axes:
        ax.grid(True, alpha=0.3)
    return fig, axes


# --------------------------------------------------------------------------- per-request series


def served_mask(table: RequestTable, warmup: int = 0) -> np.ndarray:
    """Requests the summary counts: not rejected, past the warm-up."""
    mask = table.column("status") != 2
    if warmup:
        mask &= table.column("request_id") >= warmup
    return mask


def ttft_ms(table: RequestTable, warmup: int = 0) -> np.ndarray:
    """TTFT of every request the summary counts, in ms (completion order)."""
    mask = served_mask(table, warmup)
    return (table.column("first_token_ns")[mask] - table.column("arrival_ns")[mask]) / 1e6


def tpot_ms(table: RequestTable, warmup: int = 0) -> np.ndarray:
    """TPOT of every counted request with more than one output token, in ms."""
    mask = served_mask(table, warmup) & (table.column("output_length") > 1)
    gap = table.column("finish_ns")[mask] - table.column("first_token_ns")[mask]
    return gap / (table.column("output_length")[mask] - 1) / 1e6


def cdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted values, fraction of values <= each): the empirical CDF's steps."""
    x = np.sort(np.asarray(values, dtype=float))
    return x, np.arange(1, x.size + 1) / max(x.size, 1)


def cdf_x_axis(x: np.ndarray) -> tuple[float, float, bool]:
    """(low, high, log scale) of the x axis a CDF of sorted `x` is drawn over, from the data
    alone: up to its largest value, or to its p99.5 when a few outliers lie beyond twice that
    (the steps below stay readable); log when it spans more than 200x."""
    top = float(x[-1])
    p995 = float(np.percentile(x, 99.5))
    if top > 2 * p995 > 0:
        top = p995
    bottom = float(x[0])
    if bottom > 0 and top / bottom > 200:
        return bottom / 1.25, top * 1.25, True
    span = max(top - bottom, abs(top) * 1e-3, 1e-9)
    low = 0.0 if bottom < 0.5 * top else bottom - 0.05 * span
    return low, top + 0.05 * span, False


def plot_cdf(values_ms: np.ndarray, path: Path, metric: str, slo_ms: float | None = None,
             subtitle: str = "") -> dict[str, Any]:
    """The CDF of one latency metric over requests, with p50/p90/p99 and the SLO marked.

    The x axis spans the data (`cdf_x_axis`); an SLO beyond it is named at the axis'
    edge instead of stretching the axis, which would squeeze the curve into a corner.
    """
    x, y = cdf(values_ms)
    fig, (ax,) = _figure()
    title = f"{metric} distribution over {x.size:,} requests"
    ax.set_title(title + (f"\n{subtitle}" if subtitle else ""), fontsize=11)
    xlim = None
    if x.size:
        ax.step(x, y, where="post", color=_BLUE, linewidth=1.8, label=metric)
        for q, style in ((50, ":"), (90, "--"), (99, "-.")):
            value = float(np.percentile(x, q))
            ax.axvline(value, color=_GREY, linestyle=style, linewidth=1)
            ax.annotate(f"p{q} {value:,.1f} ms", (value, q / 100), xytext=(4, -12), textcoords="offset points",
                        fontsize=8, color="#444444")
        low, high, log = cdf_x_axis(x)
        if log:
            ax.set_xscale("log")
        xlim = (low, high)
        ax.set_xlim(*xlim)
        if x[-1] > xlim[1]:
            ax.plot([], [], " ", label=f"max {x[-1]:,.1f} ms, beyond the axis")
    else:
        ax.text(0.5, 0.5, "no requests", ha="center", va="center", transform=ax.transAxes)
    slo_shown = None
    if slo_ms is not None:
        met = float((x <= slo_ms).mean()) if x.size else 0.0
        label = f"SLO {slo_ms:g} ms ({met:.1%} of requests meet it)"
        slo_shown = xlim is None or xlim[0] <= slo_ms <= xlim[1]
        if slo_shown:
            ax.axvline(slo_ms, color=_RED, linewidth=1.5, label=label)
        else:   # a red arrowhead at the edge it lies beyond, named in the legend
            right = slo_ms > xlim[1]
            ax.plot([0.985 if right else 0.015], [0.5], transform=ax.transAxes, marker=">" if right else "<",
                    markersize=9, color=_RED, linestyle="none",
                    label=f"SLO {slo_ms:g} ms, off the axis to the {'right' if right else 'left'} "
                          f"({met:.1%} of requests meet it)")
    ax.set_xlabel(f"{metric} (ms)")
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.02)
    ax.legend(loc="lower right", fontsize=9)
    fig.savefig(path)
    return {"x_ms": x, "fraction": y, "slo_ms": slo_ms, "xlim": xlim, "slo_on_axis": slo_shown}


# --------------------------------------------------------------------------- worker timelines


def _at(edges_ms: np.ndarray, time_ms: np.ndarray, cumulative) -> np.ndarray:
    """A cumulative counter sampled at `time_ms` (0 at time 0), interpolated at `edges_ms`."""
    return np.interp(edges_ms, np.concatenate(([0.0], time_ms)),
                     np.concatenate(([0.0], np.asarray(cumulative, dtype=float))))


def worker_requests(table: RequestTable, worker: str) -> dict[str, np.ndarray]:
    """First-token and finish times (ms) and output lengths of the served requests whose
    (decode) worker is `worker`, warm-up included: they all loaded it."""
    if worker not in table.workers:
        return {"first_ms": np.zeros(0), "finish_ms": np.zeros(0), "output_length": np.zeros(0)}
    mine = (table.column("worker") == table.workers.index(worker)) & (table.column("status") != 2)
    return {"first_ms": table.column("first_token_ns")[mine] / 1e6,
            "finish_ms": table.column("finish_ns")[mine] / 1e6,
            "output_length": table.column("output_length")[mine].astype(float)}


def output_tokens_by(edges_ms: np.ndarray, requests: dict[str, np.ndarray]) -> np.ndarray:
    """Output tokens delivered by each edge: a request's first token at its first-token time,
    the rest spread evenly up to its finish (records keep no per-token times)."""
    out = np.zeros(edges_ms.size)
    first, finish, length = requests["first_ms"], requests["finish_ms"], requests["output_length"]
    for lo in range(0, first.size, 4096):   # edges × requests, a block of requests at a time
        f, e, n = first[lo:lo + 4096], finish[lo:lo + 4096], length[lo:lo + 4096]
        t = edges_ms[:, None]
        spread = np.clip((t - f) / np.maximum(e - f, 1e-9), 0.0, 1.0)
        out += ((t >= f) + (n - 1) * spread).sum(axis=1)
    return out


def timeline_series(timeline: dict[str, list], requests: dict[str, np.ndarray] | None = None,
                    bins: int = 120) -> dict[str, np.ndarray]:
    """What `plot_worker_timeline` draws: the worker's sampled state as is, and rates over
    `bins` equal windows (tokens per pass, tokens computed per second, and, from `requests`
    (see `worker_requests`), output tokens per second)."""
    time_ms = np.asarray(timeline["time_ms"], dtype=float)
    last = max([float(time_ms[-1]) if time_ms.size else 0.0]
               + ([float(requests["finish_ms"].max())] if requests is not None and requests["finish_ms"].size else []))
    edges = np.linspace(0.0, last, max(1, min(bins, time_ms.size)) + 1)
    seconds = np.diff(edges) / 1e3
    tokens = np.diff(_at(edges, time_ms, timeline["tokens"]))
    passes = np.diff(_at(edges, time_ms, timeline["passes"]))
    with np.errstate(divide="ignore", invalid="ignore"):
        tokens_per_pass = np.where(passes > 0, tokens / np.where(passes > 0, passes, 1), np.nan)
        computed = np.where(seconds > 0, tokens / np.where(seconds > 0, seconds, 1), 0.0)
        output = None
        if requests is not None and requests["output_length"].size:
            delivered = np.diff(output_tokens_by(edges, requests))
            output = np.where(seconds > 0, delivered / np.where(seconds > 0, seconds, 1), 0.0)
    return {
        "time_s": time_ms / 1e3,
        "running": np.asarray(timeline["running"]),
        "waiting": np.asarray(timeline["waiting"]),
        "kv_percent": 100 * np.asarray(timeline["kv_utilization"], dtype=float),
        "window_edges_s": edges / 1e3,
        "window_s": (edges[:-1] + edges[1:]) / 2e3,
        "tokens_per_pass": tokens_per_pass,
        "computed_tok_s": computed,
        "output_tok_s": output,
    }


def plot_worker_timeline(worker: str, timeline: dict[str, list], path: Path, subtitle: str = "",
                         requests: dict[str, np.ndarray] | None = None, bins: int = 120) -> dict[str, np.ndarray]:
    """Four panels over simulated time: requests, KV cache, tokens per pass, throughput.

    The throughput is output tokens per second for a worker that serves requests to the end
    (aggregated, decode), prompt tokens computed per second for a prefill worker.
    """
    s = timeline_series(timeline, requests, bins)
    fig, axes = _figure(8.0, 8.5, rows=4)
    fig.suptitle(f"Worker {worker} over simulated time" + (f"\n{subtitle}" if subtitle else ""), fontsize=11)
    ax = axes[0]
    ax.step(s["time_s"], s["running"], where="post", color=_BLUE, linewidth=1.2, label="running (in the pass)")
    ax.step(s["time_s"], s["waiting"], where="post", color=_ORANGE, linewidth=1.2, label="waiting")
    ax.set_ylabel("requests")
    ax.set_title("Requests running and waiting", fontsize=10, loc="left")
    ax.legend(loc="best", fontsize=8, framealpha=0.9)
    ax = axes[1]
    ax.plot(s["time_s"], s["kv_percent"], color=_GREEN, linewidth=1.2)
    ax.set_ylabel("KV cache used (%)")
    ax.set_ylim(0, 105)
    ax.set_title("KV-cache utilisation", fontsize=10, loc="left")
    ax = axes[2]
    ax.plot(s["window_s"], s["tokens_per_pass"], color="#9467bd", linewidth=1.2)
    ax.set_ylabel("tokens / pass")
    ax.set_ylim(bottom=0)
    ax.set_title("Tokens per pass (prefill + decode, window mean)", fontsize=10, loc="left")
    ax = axes[3]
    if s["output_tok_s"] is not None:
        ax.plot(s["window_s"], s["output_tok_s"], color=_RED, linewidth=1.2)
        ax.set_ylabel("output tokens / s")
        ax.set_title("Output throughput (each request's tokens spread from its first token to its finish)",
                     fontsize=10, loc="left")
    else:
        ax.plot(s["window_s"], s["computed_tok_s"], color=_RED, linewidth=1.2)
        ax.set_ylabel("tokens computed / s")
        ax.set_title("Prefill throughput (prompt tokens computed per second)", fontsize=10, loc="left")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("simulated time (s)")
    fig.savefig(path)
    return s


def run_plot_names(result) -> list[str]:
    """The files `plot_run` writes for this result."""
    sessions = ["ttft_by_turn.png"] if getattr(result, "sessions", None) is not None else []
    scaled = [f"autoscaling_{role}.png" for role in result.summary.get("autoscaling", {})]
    return ["ttft_cdf.png", "tpot_cdf.png", *sessions, *scaled,
            *(f"timeline_{worker}.png" for worker in result.timelines)]


def plot_run(result, paths: dict[str, Path]) -> dict[str, dict]:
    """Every figure of one run; `paths` maps each name of `run_plot_names` to where it goes."""
    cfg = result.config
    fleet = " + ".join(f"{role.count}× {name} tp{role.tp}{' ' + role.gpu if role.gpu else ''}"
                       for name, role in cfg.engine.roles().items())
    subtitle = f"{cfg.model} on {cfg.gpu}: {fleet}, {cfg.engine.backend}"
    warmup = cfg.workload.warmup_requests
    data = {
        "ttft_cdf.png": plot_cdf(ttft_ms(result.requests, warmup), paths["ttft_cdf.png"], "TTFT",
                                 cfg.slo.ttft_ms, subtitle),
        "tpot_cdf.png": plot_cdf(tpot_ms(result.requests, warmup), paths["tpot_cdf.png"], "TPOT",
                                 cfg.slo.tpot_ms, subtitle),
    }
    if "ttft_by_turn.png" in paths:
        from servesim.metrics.session_plots import plot_ttft_by_turn

        data["ttft_by_turn.png"] = plot_ttft_by_turn(result.summary["sessions"], paths["ttft_by_turn.png"], subtitle)
    for role, scaled in result.summary.get("autoscaling", {}).items():
        from servesim.metrics.autoscaling_plots import plot_autoscaling

        period_s = cfg.engine.roles()[role].autoscaling.sync_period_s
        name = f"autoscaling_{role}.png"
        data[name] = plot_autoscaling(role, scaled, result.requests, period_s, paths[name], subtitle, warmup)
    for worker, timeline in result.timelines.items():
        name = f"timeline_{worker}.png"
        data[name] = plot_worker_timeline(worker, timeline, paths[name], subtitle,
                                          worker_requests(result.requests, worker))
    return data


# --------------------------------------------------------------------------- sweeps


def _axis_range(values: list[float]) -> tuple[float, float]:
    """From 0 when the data reach down to half their top, else a margin around them."""
    low, high = min(values), max(values)
    if low < 0.5 * high or high <= 0:
        return 0.0, 1.12 * high if high > 0 else 1.0
    margin = 0.12 * max(high - low, 0.02 * high)
    return max(0.0, low - margin), high + margin


def _marker_radius_px(size_pt2: float) -> float:
    """Half the width of a scatter marker of area `size_pt2` (points²), in pixels."""
    return 0.5 * size_pt2 ** 0.5 * DPI / 72


def _pareto_labels(points: list[dict], frontier: list[int], best: int | None) -> list[tuple[float, float, str]]:
    """One label per run of frontier points with the same fleet, and the recommended trial's."""
    by_id = {p["trial_id"]: p for p in points}
    out, previous = [], None
    for p in (by_id[t] for t in frontier):
        if p["label"] != previous and p["trial_id"] != best:   # the recommended one is labelled below
            out.append((p["x"], p["y"], p["label"]))
        previous = p["label"]
    if best is not None and best in by_id:
        b = by_id[best]
        out.insert(0, (b["x"], b["y"], f"recommended: {b['label']}"))
    return out


_INSET_SPOTS = ((0.05, 0.07), (0.67, 0.07), (0.05, 0.55), (0.67, 0.55))   # lower left first
_INSET_SIZE = (0.28, 0.34)


def _zoom_on_meeting(ax, points: list[dict], best: int | None, line_x: float | None = None):
    """An inset magnifying the trials that meet the SLOs when they huddle in under 4% of the
    axes (as close rivals do): their trial ids, one label per position. None when not needed.
    It goes in the corner with the fewest points, clear of the vertical line at `line_x`."""
    from servesim.metrics.labels import marker_boxes, place_labels

    ok = [p for p in points if p["ok"]]
    spots: dict[tuple[float, float], list[int]] = {}
    for p in ok:
        spots.setdefault((p["x"], p["y"]), []).append(p["trial_id"])
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    xs, ys = [p["x"] for p in ok], [p["y"] for p in ok]
    if len(spots) < 2 or (max(xs) - min(xs)) > 0.04 * (x1 - x0) or (max(ys) - min(ys)) > 0.04 * (y1 - y0):
        return None
    to_axes = ax.transAxes.inverted().transform
    where = [to_axes(ax.transData.transform((p["x"], p["y"]))) for p in points]
    w, h = _INSET_SIZE

    line = None if line_x is None else to_axes(ax.transData.transform((line_x, y0)))[0]

    def crowd(spot):
        crossed = line is not None and spot[0] - 0.02 <= line <= spot[0] + w + 0.02
        return 0.5 * crossed + sum(1 for fx, fy in where if spot[0] - 0.03 <= fx <= spot[0] + w + 0.03
                                   and spot[1] - 0.03 <= fy <= spot[1] + h + 0.03)

    spot = min(_INSET_SPOTS, key=crowd)
    inset = ax.inset_axes([spot[0], spot[1], w, h])
    pad_x = max(0.25 * (max(xs) - min(xs)), 0.002 * max(xs))
    pad_y = max(0.25 * (max(ys) - min(ys)), 0.002 * max(ys))
    inset.set_xlim(min(xs) - pad_x, max(xs) + pad_x)
    inset.set_ylim(min(ys) - pad_y, max(ys) + pad_y)
    inset.scatter(xs, ys, s=34, color=_BLUE, edgecolors="white", linewidths=0.6, zorder=5)
    if best is not None and any(p["trial_id"] == best for p in ok):
        b = next(p for p in ok if p["trial_id"] == best)
        inset.scatter([b["x"]], [b["y"]], s=200, marker="*", facecolors="none", edgecolors=_RED,
                      linewidths=1.6, zorder=6)
    inset.ticklabel_format(useOffset=False, style="plain")
    inset.tick_params(labelsize=6.5)
    inset.grid(True, alpha=0.3)
    inset.set_title("meeting the SLOs (zoomed; trial ids)", fontsize=7.5)
    inset.set_zorder(8)   # above the parent's lines and markers
    zoom = ax.indicate_inset_zoom(inset, edgecolor="#555555", alpha=0.6)
    for connector in getattr(zoom, "connectors", None) or []:   # the frame says where; lines would cross the plot
        connector.set_visible(False)
    ax.figure.canvas.draw()
    targets = [(x, y, ", ".join(map(str, sorted(ids)))) for (x, y), ids in sorted(spots.items())]
    obstacles = marker_boxes(inset, xs, ys, _marker_radius_px(34))
    place_labels(inset, targets, obstacles, fontsize=6.5)
    return inset


def plot_pareto(points: list[dict], frontier: list[int], path: Path, title: str,
                min_interactivity: float | None = None, best: int | None = None) -> dict[str, Any]:
    """Throughput per GPU against tokens per second per user, one dot per trial.

    `points` are dicts with `trial_id`, `x` (tok/s/user), `y` (output tok/s per GPU),
    `ok` (meets the SLOs) and `label`; `frontier` lists the trial ids on the Pareto
    frontier; `min_interactivity` draws the TPOT SLO as a vertical line. Trials meeting
    the SLOs are drawn above the others and the recommended one as an outlined star, so
    none hides another; labels are placed clear of every point (`metrics.labels`).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from servesim.metrics.labels import Box, marker_boxes, place_labels

    fig, (ax,) = _figure(8.0, 5.6)
    FigureCanvasAgg(fig)
    by_id = {p["trial_id"]: p for p in points}
    sizes = {False: 18, True: 34}
    for ok, colour, label in ((False, _GREY, "misses the SLOs"), (True, _BLUE, "meets the SLOs")):
        chosen = [p for p in points if p["ok"] == ok]
        if chosen:
            ax.scatter([p["x"] for p in chosen], [p["y"] for p in chosen], s=sizes[ok], color=colour,
                       alpha=1.0 if ok else 0.7, edgecolors="white" if ok else "none", linewidths=0.6,
                       label=f"{label} ({len(chosen)})", zorder=5 if ok else 2)
    front = [by_id[t] for t in frontier]
    if front:
        ax.plot([p["x"] for p in front], [p["y"] for p in front], color=_ORANGE, linewidth=1.8,
                label="Pareto frontier", zorder=1)
        ax.scatter([p["x"] for p in front], [p["y"] for p in front], s=70, facecolors="none",
                   edgecolors=_ORANGE, linewidths=1.5, zorder=3)
    star = by_id.get(best) if best is not None else None
    if star is not None:   # outlined, not filled: the trials beneath it stay visible
        ax.scatter([star["x"]], [star["y"]], s=200, marker="*", facecolors="none", edgecolors=_RED,
                   linewidths=1.6, zorder=6, label=f"recommended (trial {best})")
    if min_interactivity is not None:
        ax.axvline(min_interactivity, color=_RED, linestyle="--", linewidth=1,
                   label=f"TPOT SLO ({min_interactivity:,.1f} tok/s/user)")
    ax.set_xlabel("interactivity: output tokens / s per user (1000 / median TPOT ms)")
    ax.set_ylabel("throughput: output tokens / s per GPU")
    ax.set_title(title, fontsize=11)
    xs = [p["x"] for p in points] + ([min_interactivity] if min_interactivity else [])
    ax.set_xlim(*(_axis_range(xs) if xs else (0, 1)))
    ax.set_ylim(*(_axis_range([p["y"] for p in points]) if points else (0, 1)))
    if points:
        fig.legend(loc="outside lower center", ncols=3, fontsize=8, frameon=False)
    fig.canvas.draw()   # the layout is final: labels are measured where they are saved
    inset = _zoom_on_meeting(ax, points, best, min_interactivity)
    obstacles = marker_boxes(ax, [p["x"] for p in points], [p["y"] for p in points], _marker_radius_px(70))
    if star is not None:
        obstacles += marker_boxes(ax, [star["x"]], [star["y"]], _marker_radius_px(200))
    if inset is not None:   # its frame, tick labels and title
        extent = inset.get_tightbbox(fig.canvas.get_renderer())
        obstacles.append(Box(extent.x0, extent.y0, extent.x1, extent.y1))
    labels = place_labels(ax, _pareto_labels(points, frontier, best), obstacles)
    fig.savefig(path)
    return {"x": [p["x"] for p in points], "y": [p["y"] for p in points], "frontier": list(frontier),
            "labels": labels, "obstacles": obstacles, "zoomed": inset is not None}
