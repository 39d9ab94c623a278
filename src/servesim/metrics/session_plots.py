"""TTFT by turn index of a sessions run (summary.json's `sessions` block), as `--plots` draws it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servesim.metrics.plots import _BLUE, _ORANGE, _figure


def plot_ttft_by_turn(block: dict, path: Path, subtitle: str = "") -> dict[str, Any]:
    """Mean and p90 TTFT of each turn index (1-based on the axis), turns that were served."""
    turns = [k + 1 for k, v in enumerate(block["mean_ttft_ms_by_turn"]) if v is not None]
    mean = [v for v in block["mean_ttft_ms_by_turn"] if v is not None]
    p90 = [v for v in block["p90_ttft_ms_by_turn"] if v is not None]
    fig, (ax,) = _figure()
    title = f"TTFT by turn over {block['num_sessions']:,} sessions"
    ax.set_title(title + (f"\n{subtitle}" if subtitle else ""), fontsize=11)
    if turns:
        ax.plot(turns, mean, marker="o", color=_BLUE, linewidth=1.8, label="mean")
        ax.plot(turns, p90, marker="s", color=_ORANGE, linewidth=1.2, linestyle="--", label="p90")
        ax.legend(loc="upper left", fontsize=9)
    else:
        ax.text(0.5, 0.5, "no turns served", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("turn (1 = a session's first request)")
    ax.set_ylabel("TTFT (ms)")
    ax.set_ylim(bottom=0)
    fig.savefig(path)
    return {"turn": turns, "mean_ms": mean, "p90_ms": p90}
