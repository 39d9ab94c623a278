"""What a result file says about one benchmark run, in one shape for every tool.

Times are milliseconds (per-request arrays: seconds, as vLLM stores them), throughputs per
second. A figure a file does not hold is None and is left out of the comparison; what the
workload cannot be rebuilt without is an error naming the field (`need`).
"""

from __future__ import annotations

import math
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
        """The x axis of a concurrency sweep: max_concurrency (None for a run without one)."""
        if self.max_concurrency is not None:
            return float(self.max_concurrency)
        return None

    def figure(self, metric: str, stat: str) -> float | None:
        return self.stats.get(metric, {}).get(stat)


def engine_named(text: object) -> str | None:
    """The engine a tool's backend or server name stands for (the registry's, by name or label:
    "sglang-oai" → sglang, "tensorrtllm" → trtllm), or None for a generic client such as openai."""
    from servesim.engine.registry import BACKENDS

    if not isinstance(text, str):
        return None

    def squash(name: str) -> str:
        return name.lower().replace("-", "").replace("_", "")

    head = squash(text.split("-")[0])
    for name, backend in BACKENDS.items():
        if squash(text) in (squash(name), squash(backend.label)) or head == squash(name):
            return name
    return None


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


# --------------------------------------------------------------------------- types, checked once per run


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _bad(run: MeasuredRun, name: str, what: str, value: Any) -> ServesimError:
    shown = repr(value)
    return ServesimError(f"{run.path}: {name} must be {what}, got {shown[:60] + '...' if len(shown) > 60 else shown}")


def _count(run: MeasuredRun, name: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or value > 2**40:
        raise _bad(run, name, f"a whole number of at least {minimum}", value)
    return value


def _rate(run: MeasuredRun, name: str, value: Any) -> float | str | None:
    if value is None or value == "inf" or value == float("inf"):
        return None if value is None else "inf"
    if not _is_number(value) or value <= 0:
        raise _bad(run, name, "a positive number or inf", value)
    return float(value)


def _numbers(run: MeasuredRun, name: str, values: Any, minimum: float | None = None) -> list[float] | None:
    if values is None:
        return None
    if not isinstance(values, list) or not all(_is_number(v) and (minimum is None or v >= minimum)
                                               for v in values):
        what = "a list of numbers" + ("" if minimum is None else f" of at least {minimum:g}")
        raise _bad(run, name, what, values)
    return [float(v) for v in values]


def check_run(run: MeasuredRun) -> MeasuredRun:
    """Every field of the right type and range, or one sentence naming the field (as the file spells it)."""
    run.num_requests = _count(run, "num_prompts", run.num_requests)
    run.completed = _count(run, "completed", run.completed)
    run.failed = _count(run, "failed", run.failed)
    run.request_rate = _rate(run, "request_rate", run.request_rate)
    run.burstiness = _rate(run, "burstiness", run.burstiness)
    if run.max_concurrency is not None:
        run.max_concurrency = _count(run, "max_concurrency", run.max_concurrency, 1)
    for name in ("model", "engine"):
        if getattr(run, name) is not None and not isinstance(getattr(run, name), str):
            raise _bad(run, name, "text", getattr(run, name))
    for name in ("input_lens", "output_lens", "ok_output_lens"):
        values = getattr(run, name)
        if values is not None:
            setattr(run, name, [_count(run, name, v) for v in (values if isinstance(values, list) else [values])])
            if not isinstance(values, list):
                raise _bad(run, name, "a list of whole numbers", values)
    run.start_times = _numbers(run, "start_times", run.start_times, 0.0)
    run.ttfts = _numbers(run, "ttfts", run.ttfts, 0.0)
    run.latencies = _numbers(run, "latencies", run.latencies, 0.0)
    if run.itls is not None:
        if not isinstance(run.itls, list):
            raise _bad(run, "itls", "a list of lists of numbers", run.itls)
        run.itls = [_numbers(run, "itls", gaps, 0.0) or [] for gaps in run.itls]
    for metric, values in run.stats.items():
        for stat, value in values.items():
            if value is not None and not _is_number(value):
                raise _bad(run, f"{stat} {metric}", "a number", value)
    for name, value in list(run.rates.items()) + [("duration", run.duration_s),
                                                  ("mean input length", run.mean_input_length),
                                                  ("mean output length", run.mean_output_length)]:
        if value is not None and (not _is_number(value) or value < 0):
            raise _bad(run, name, "a non-negative number", value)
    return run
