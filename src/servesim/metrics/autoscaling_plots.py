"""The autoscaling figure of a run (`run --plots`): replicas, load and latency over time.

One file per autoscaled role, `autoscaling_<role>.png`, drawn from summary.json's
`autoscaling.<role>` (cluster/autoscaler.py) and the run's records.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from servesim.metrics.plots import _BLUE, _GREEN, _GREY, _ORANGE, _RED, _figure, served_mask
from servesim.metrics.records import RequestTable


def autoscaling_series(scaled: dict, table: RequestTable, period_s: float, warmup: int = 0) -> dict[str, np.ndarray]:
    """What `plot_autoscaling` draws: the syncs as summary.json has them, the live replicas as
    a step after each change, and the mean TTFT of the requests arriving in each sync period."""
    rows = np.asarray(scaled["timeline"], dtype=float).reshape(-1, 5)
    count = scaled["replicas_at_start"]
    times, live = [0.0], [count]
    for at, _, state in scaled["changes"]:   # + at each replica asked for, − at each removal
        if state in ("provisioning", "removed"):
            count += 1 if state == "provisioning" else -1
            times.append(at)
            live.append(count)
    mask = served_mask(table, warmup)
    arrival_s = table.column("arrival_ns")[mask] / 1e9
    ttft_ms = (table.column("first_token_ns")[mask] - table.column("arrival_ns")[mask]) / 1e6
    edges = np.arange(0.0, (arrival_s.max() if len(arrival_s) else 0.0) + period_s, period_s)
    if len(edges) < 2:
        edges = np.array([0.0, period_s])
    which = np.clip(np.searchsorted(edges, arrival_s, side="right") - 1, 0, len(edges) - 2)
    sums = np.bincount(which, weights=ttft_ms, minlength=len(edges) - 1)
    counts = np.bincount(which, minlength=len(edges) - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_ttft = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return {"sync_s": rows[:, 0], "ready": rows[:, 2], "average": rows[:, 3], "applied": rows[:, 4],
            "change_s": np.asarray(times), "live": np.asarray(live), "bin_start_s": edges[:-1],
            "mean_ttft_ms": mean_ttft}


def plot_autoscaling(role: str, scaled: dict, table: RequestTable, period_s: float, path: Path,
                     subtitle: str = "", warmup: int = 0) -> dict[str, np.ndarray]:
    """Three panels over simulated time: replicas, the metric against its target, TTFT."""
    s = autoscaling_series(scaled, table, period_s, warmup)
    fig, axes = _figure(8.0, 7.0, rows=3)
    fig.suptitle(f"Autoscaling of {role} over simulated time" + (f"\n{subtitle}" if subtitle else ""), fontsize=11)
    ax = axes[0]
    ax.step(s["change_s"], s["live"], where="post", color=_BLUE, linewidth=1.4, label="live (provisioning, ready, draining)")
    ax.step(s["sync_s"], s["ready"], where="post", color=_GREEN, linewidth=1.2, label="ready, at each sync")
    ax.step(s["sync_s"], s["applied"], where="post", color=_GREY, linestyle="--", linewidth=1.0, label="applied")
    ax.set_ylabel("replicas")
    ax.set_ylim(bottom=0)
    ax.set_title("Replicas", fontsize=10, loc="left")
    ax.legend(loc="best", fontsize=8, framealpha=0.9)
    ax = axes[1]
    ax.step(s["sync_s"], s["average"], where="post", color=_ORANGE, linewidth=1.2, label="average over ready replicas")
    ax.axhline(scaled["target"], color=_GREY, linestyle=":", linewidth=1.0, label="target")
    ax.set_ylabel(scaled["metric"])
    ax.set_ylim(bottom=0)
    ax.set_title(f"Load: {scaled['metric']} per replica at each sync", fontsize=10, loc="left")
    ax.legend(loc="best", fontsize=8, framealpha=0.9)
    ax = axes[2]
    ax.step(s["bin_start_s"], s["mean_ttft_ms"], where="post", color=_RED, linewidth=1.2)
    ax.set_ylabel("mean TTFT (ms)")
    ax.set_ylim(bottom=0)
    ax.set_title("Latency: mean TTFT of the requests arriving in each sync period", fontsize=10, loc="left")
    ax.set_xlabel("simulated time (s)")
    fig.savefig(path)
    return s
