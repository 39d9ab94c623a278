"""Judging trials: per-GPU metrics, the SLO filter, the objective's ranking, the Pareto frontier.

A trial *meets the SLOs* when it ran, served every request (none rejected), and the
chosen percentile (50, 90 or 99) of TTFT, TPOT and E2E is within each target set.
Rankings put trials that meet the SLOs first, then order by the objective, then by
trial id, so equal scores never depend on completion order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from servesim.config import SloConfig
from servesim.errors import ServesimError
from servesim.sweep.space import COST_OBJECTIVES, MinGpus, SweepSlo, SweepSpace, ThroughputPerGpu

OBJECTIVE_LABELS = {
    "goodput_per_gpu": "goodput per GPU (req/s)",
    "throughput_per_gpu": "output throughput per GPU (tok/s)",
    "min_gpus": "fewest GPUs",
    "cost_per_mtok": "cost per million output tokens ($)",
    "goodput_per_dollar": "good requests per dollar",
}


def percentile_key(metric: str, percentile: int) -> str:
    return f"median_{metric}_ms" if percentile == 50 else f"p{percentile}_{metric}_ms"


def derived_metrics(summary: dict) -> dict[str, float | None]:
    """Per-GPU throughputs and interactivity of one run's summary."""
    gpus = summary.get("gpus") or 0
    goodput = summary.get("request_goodput_req_s")
    output = summary.get("output_throughput_tok_s")
    tpot = summary.get("median_tpot_ms")
    return {
        "goodput_per_gpu": goodput / gpus if goodput is not None and gpus else None,
        "throughput_per_gpu": output / gpus if output is not None and gpus else None,
        # Interactivity, the axis engines are compared on: tokens per second one user sees.
        "tok_s_per_user": 1e3 / tpot if tpot else None,
        "cost_per_mtok": summary.get("cost_per_mtok_output_usd"),
        "goodput_per_dollar": (summary.get("good_requests") or 0) / dollars if (dollars := summary.get("cost_usd"))
        else None,
    }


@dataclass(frozen=True)
class Judge:
    slo: SweepSlo
    objective: Any        # GoodputPerGpu | ThroughputPerGpu | MinGpus

    @classmethod
    def for_space(cls, space: SweepSpace, base_slo: SloConfig, priced: bool = True) -> Judge:
        if space.objective.kind in COST_OBJECTIVES and not priced:
            raise ServesimError(f"objective {space.objective.kind} needs GPU prices: set cost.gpu_price_per_hour "
                                "in the base config ($ per GPU-hour for each GPU the trials use)")
        slo = space.slo or SweepSlo(ttft_ms=base_slo.ttft_ms, tpot_ms=base_slo.tpot_ms, e2e_ms=base_slo.e2e_ms)
        return cls(slo, space.objective)

    def targets(self) -> list[tuple[str, str, float]]:
        """(summary key, label, limit ms) of each SLO set."""
        out = []
        for metric, label, limit in (("ttft", "TTFT", self.slo.ttft_ms), ("tpot", "TPOT", self.slo.tpot_ms),
                                     ("e2e", "E2E", self.slo.e2e_ms)):
            if limit is not None:
                out.append((percentile_key(metric, self.slo.percentile), f"p{self.slo.percentile} {label}", limit))
        return out

    def violations(self, row: dict) -> list[str]:
        """Why a trial misses the SLOs, one short phrase each (empty: it meets them)."""
        if row["status"] != "ok":
            return [f"did not run ({row['status']})"]
        summary = row["summary"]
        out = []
        if not summary.get("completed"):
            out.append("no request completed")
        if summary.get("failed_requests"):
            out.append(f"{summary['failed_requests']} requests rejected")
        for key, label, limit in self.targets():
            value = summary.get(key)
            if value is not None and value > limit:
                out.append(f"{label} {value:,.0f} ms > {limit:,.0f}")
        return out

    def meets(self, row: dict) -> bool:
        return not self.violations(row)

    def score(self, row: dict) -> float | None:
        """The objective's value for display (higher is better except for min_gpus: GPUs)."""
        if row["status"] != "ok":
            return None
        if isinstance(self.objective, MinGpus):
            return row["summary"].get("gpus")
        kind = self.objective.kind
        key = kind if kind in ("throughput_per_gpu", *COST_OBJECTIVES) else "goodput_per_gpu"
        return derived_metrics(row["summary"])[key]

    def rank_key(self, row: dict) -> tuple:
        """Smaller is better: SLO-meeting trials first, then the objective."""
        if row["status"] != "ok":
            return (2,)
        group = 0 if self.meets(row) else 1
        summary = row["summary"]
        derived = derived_metrics(summary)
        goodput = -(derived["goodput_per_gpu"] or 0.0)
        throughput = -(derived["throughput_per_gpu"] or 0.0)
        # Ties (common when every candidate keeps up with the load) go to the faster for users.
        faster = (-(derived["tok_s_per_user"] or 0.0), summary.get(percentile_key("ttft", self.slo.percentile))
                  or 0.0)
        if isinstance(self.objective, MinGpus):
            return (group, float(summary.get("gpus") or 0), goodput, *faster)
        if isinstance(self.objective, ThroughputPerGpu):
            return (group, throughput, goodput, *faster)
        if self.objective.kind == "cost_per_mtok":
            cost = derived["cost_per_mtok"]
            return (group, cost if cost is not None else float("inf"), goodput, *faster)
        if self.objective.kind == "goodput_per_dollar":
            return (group, -(derived["goodput_per_dollar"] or 0.0), goodput, *faster)
        return (group, goodput, throughput, *faster)

    def ranked(self, rows: Sequence[dict]) -> list[dict]:
        return sorted(rows, key=lambda r: (self.rank_key(r), r["trial_id"]))


def pareto_frontier(points: Sequence[tuple[int, float, float]]) -> list[int]:
    """Ids of the points no other point beats on both axes (both maximised), by increasing x.

    `points` are (id, x, y). A point is dominated when another has x and y at least as
    large and one of them larger; of identical points only the lowest id is kept.
    """
    best_y = None
    frontier = []
    for pid, x, y in sorted(points, key=lambda p: (-p[1], -p[2], p[0])):
        if best_y is None or y > best_y:
            frontier.append(pid)
            best_y = y
    return frontier[::-1]
