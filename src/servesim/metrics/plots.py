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


def plot_cdf(values_ms: np.ndarray, path: Path, metric: str, slo_ms: float | None = None,
             subtitle: str = "") -> dict[str, Any]:
    """The CDF of one latency metric over requests, with p50/p90/p99 and the SLO marked."""
    x, y = cdf(values_ms)
    fig, (ax,) = _figure()
    title = f"{metric} distribution over {x.size:,} requests"
    ax.set_title(title + (f"\n{subtitle}" if subtitle else ""), fontsize=11)
    if x.size:
        ax.step(x, y, where="post", color=_BLUE, linewidth=1.8, label=metric)
        for q, style in ((50, ":"), (90, "--"), (99, "-.")):
            value = float(np.percentile(x, q))
            ax.axvline(value, color=_GREY, linestyle=style, linewidth=1)
            ax.annotate(f"p{q} {value:,.1f} ms", (value, q / 100), xytext=(4, -12), textcoords="offset points",
                        fontsize=8, color="#444444")
        if x[0] > 0 and x[-1] / x[0] > 200:
            ax.set_xscale("log")
    else:
        ax.text(0.5, 0.5, "no requests", ha="center", va="center", transform=ax.transAxes)
    if slo_ms is not None:
        met = float((x <= slo_ms).mean()) if x.size else 0.0
        ax.axvline(slo_ms, color=_RED, linewidth=1.5, label=f"SLO {slo_ms:g} ms ({met:.1%} of requests meet it)")
    ax.set_xlabel(f"{metric} (ms)")
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.02)
    ax.legend(loc="lower right", fontsize=9)
    fig.savefig(path)
    return {"x_ms": x, "fraction": y, "slo_ms": slo_ms}


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
    return ["ttft_cdf.png", "tpot_cdf.png", *(f"timeline_{worker}.png" for worker in result.timelines)]


def plot_run(result, paths: dict[str, Path]) -> dict[str, dict]:
    """Every figure of one run; `paths` maps each name of `run_plot_names` to where it goes."""
    cfg = result.config
    fleet = " + ".join(f"{role.count}× {name} tp{role.tp}" for name, role in cfg.engine.roles().items())
    subtitle = f"{cfg.model} on {cfg.gpu}: {fleet}, {cfg.engine.backend}"
    warmup = cfg.workload.warmup_requests
    data = {
        "ttft_cdf.png": plot_cdf(ttft_ms(result.requests, warmup), paths["ttft_cdf.png"], "TTFT",
                                 cfg.slo.ttft_ms, subtitle),
        "tpot_cdf.png": plot_cdf(tpot_ms(result.requests, warmup), paths["tpot_cdf.png"], "TPOT",
                                 cfg.slo.tpot_ms, subtitle),
    }
    for worker, timeline in result.timelines.items():
        name = f"timeline_{worker}.png"
        data[name] = plot_worker_timeline(worker, timeline, paths[name], subtitle,
                                          worker_requests(result.requests, worker))
    return data


# --------------------------------------------------------------------------- sweeps


def plot_pareto(points: list[dict], frontier: list[int], path: Path, title: str,
                min_interactivity: float | None = None, best: int | None = None) -> dict[str, Any]:
    """Throughput per GPU against tokens per second per user, one dot per trial.

    `points` are dicts with `trial_id`, `x` (tok/s/user), `y` (output tok/s per GPU),
    `ok` (meets the SLOs) and `label`; `frontier` lists the trial ids on the Pareto
    frontier; `min_interactivity` draws the TPOT SLO as a vertical line.
    """
    fig, (ax,) = _figure(8.0, 5.6)
    by_id = {p["trial_id"]: p for p in points}
    for ok, colour, label in ((False, _GREY, "misses the SLOs"), (True, _BLUE, "meets the SLOs")):
        chosen = [p for p in points if p["ok"] == ok]
        if chosen:
            ax.scatter([p["x"] for p in chosen], [p["y"] for p in chosen], s=18, color=colour, alpha=0.7,
                       label=f"{label} ({len(chosen)})", zorder=2)
    front = [by_id[t] for t in frontier]
    if front:
        ax.plot([p["x"] for p in front], [p["y"] for p in front], color=_ORANGE, linewidth=1.8,
                label="Pareto frontier", zorder=1)
        ax.scatter([p["x"] for p in front], [p["y"] for p in front], s=70, facecolors="none",
                   edgecolors=_ORANGE, linewidths=1.5, zorder=3)
        previous, placed = None, 0
        for p in front:   # one label per run of frontier points with the same fleet, above and below in turn
            if p["label"] != previous:
                ax.annotate(p["label"], (p["x"], p["y"]), xytext=(7, 6 if placed % 2 == 0 else -13),
                            textcoords="offset points", fontsize=7.5, color="#333333")
                placed += 1
            previous = p["label"]
    if best is not None and best in by_id:
        b = by_id[best]
        ax.scatter([b["x"]], [b["y"]], s=220, marker="*", color=_RED, zorder=4, label=f"recommended (trial {best})")
    if min_interactivity is not None:
        ax.axvline(min_interactivity, color=_RED, linestyle="--", linewidth=1,
                   label=f"TPOT SLO ({min_interactivity:,.1f} tok/s/user)")
    ax.set_xlabel("interactivity: output tokens / s per user (1000 / median TPOT ms)")
    ax.set_ylabel("throughput: output tokens / s per GPU")
    ax.set_title(title, fontsize=11)
    xs = [p["x"] for p in points] + ([min_interactivity] if min_interactivity else [])
    ax.set_xlim(0, 1.12 * max(xs) if xs else 1)
    ax.set_ylim(0, 1.12 * max(p["y"] for p in points) if points else 1)
    if points:
        fig.legend(loc="outside lower center", ncols=3, fontsize=8, frameon=False)
    fig.savefig(path)
    return {"x": [p["x"] for p in points], "y": [p["y"] for p in points], "frontier": list(frontier)}
