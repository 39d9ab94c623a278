"""What a result file says about one benchmark run, in one shape for every tool.

Times are milliseconds (per-request arrays: seconds, as vLLM stores them), throughputs per
second. A figure a file does not hold is None and is left out of the comparison; what the
workload cannot be rebuilt without is an error naming the field (`need`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from servesim.errors import ServesimError

METRICS = ("ttft", "tpot", "itl", "e2e")
STATS = ("mean", "median", "p90", "p99")
RATES = ("request_throughput", "output_throughput", "total_token_throughput")


@dataclass
class MeasuredRun:
    """One run (one comparison row) of one result file."""

    tool: str                                   # "vllm", "sglang", "aiperf", "genai-perf", "guidellm"
    path: Path
    label: str                                  # the row's name: the file, or file#index for a JSONL line
    num_requests: int                           # requests sent (completed + failed)
    completed: int
    failed: int = 0
    model: str | None = None
    engine: str | None = None                   # the server's engine when the file says (vllm, sglang, ...)
    # Traffic: vllm bench serve's terms ("inf" for all at once).
    request_rate: float | str | None = None
    burstiness: float | str | None = None
    max_concurrency: int | None = None
    ramp_up: dict[str, Any] | None = None       # ramp_up_strategy/_start_rps/_end_rps
    # Lengths: per request when recorded, else random-dataset settings, else means.
    input_lens: list[int] | None = None
    output_lens: list[int] | None = None
    start_times: list[float] | None = None      # s from the first request's send
    random_lengths: dict[str, Any] | None = None   # input_len, output_len, range_ratio, rule
    mean_input_length: float | None = None
    mean_output_length: float | None = None
    # Per-request measurements, seconds (successful requests; None where not recorded).
    ttfts: list[float] | None = None
    itls: list[list[float]] | None = None
    latencies: list[float] | None = None
    ok_output_lens: list[int] | None = None     # output lengths of those same successful requests
    # Reported figures: stats[metric][stat] in ms; rates per second; duration in s.
    stats: dict[str, dict[str, float | None]] = field(default_factory=dict)
    rates: dict[str, float | None] = field(default_factory=dict)
    duration_s: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def detailed(self) -> bool:
        return self.ttfts is not None and self.input_lens is not None

    @property
    def concurrency(self) -> float | None:
        """The x axis of a concurrency sweep: max_concurrency, else the request rate."""
        if self.max_concurrency is not None:
            return float(self.max_concurrency)
        return None

    def figure(self, metric: str, stat: str) -> float | None:
        return self.stats.get(metric, {}).get(stat)


def need(data: dict, key: str, path: Path, tool: str, where: str = "") -> Any:
    """data[key], or the one-sentence error naming the missing field."""
    if not isinstance(data, dict) or key not in data or data[key] is None:
        raise ServesimError(f"{path}: this {tool} result has no {where}{key!r}, which the comparison needs")
    return data[key]


def number(value: Any, path: Path, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ServesimError(f"{path}: {key} must be a number, got {value!r}")
    return float(value)


def stats_from_samples(values_ms: np.ndarray) -> dict[str, float | None]:
    """mean, median, p90, p99 of samples in ms, as numpy computes them (vLLM's own way)."""
    if values_ms.size == 0:
        return {s: None for s in STATS}
    return {"mean": float(np.mean(values_ms)), "median": float(np.median(values_ms)),
            "p90": float(np.percentile(values_ms, 90)), "p99": float(np.percentile(values_ms, 99))}


def per_request_stats(run: MeasuredRun) -> dict[str, dict[str, float | None]]:
    """TTFT, TPOT, ITL and E2E statistics from the per-request arrays (successful requests only):
    TPOT = (latency − TTFT) / (output − 1) for outputs longer than one token, as vLLM's
    calculate_metrics does."""
    out: dict[str, dict[str, float | None]] = {}
    if run.ttfts is None:
        return out
    ttft = np.asarray(run.ttfts, dtype=float)
    out["ttft"] = stats_from_samples(ttft * 1e3)
    if run.latencies is not None and run.ok_output_lens is not None:
        latency = np.asarray(run.latencies, dtype=float)
        outputs = np.asarray(run.ok_output_lens, dtype=float)
        many = outputs > 1
        out["tpot"] = stats_from_samples((latency[many] - ttft[many]) / (outputs[many] - 1) * 1e3)
        out["e2e"] = stats_from_samples(latency * 1e3)
    if run.itls is not None:
        gaps = [g for gaps in run.itls for g in gaps]
        out["itl"] = stats_from_samples(np.asarray(gaps, dtype=float) * 1e3)
    return out


def fill_missing_stats(run: MeasuredRun) -> None:
    """Figures the file's summary lacks, computed from its per-request arrays where it has them."""
    computed = per_request_stats(run)
    for metric, values in computed.items():
        have = run.stats.setdefault(metric, {})
        for stat, value in values.items():
            if have.get(stat) is None:
                have[stat] = value
