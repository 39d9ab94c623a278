"""guidellm's benchmarks JSON (guidellm 0.8.1, `guidellm benchmark --output-path x.json`).

The file is a `GenerativeBenchmarksReport` (guidellm/benchmark/schemas/report.py): metadata,
config, and `benchmarks`, a list of `GenerativeBenchmark` (schemas/benchmark.py), each one
comparison row: config.strategy (type_ synchronous, concurrent with `streams`, throughput,
constant or poisson with `rate`), duration (s), and metrics (schemas/metrics.py
GenerativeMetrics) whose entries are StatusDistributionSummary objects — successful /
errored / incomplete / total, each with mean, median and percentiles.p90/p99:
time_to_first_token_ms, time_per_output_token_ms, inter_token_latency_ms, request_latency
(s), prompt_token_count, output_token_count, requests_per_second, output_tokens_per_second,
tokens_per_second; request_totals counts the requests by status.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servesim.errors import ServesimError
from servesim.validate.measured import MeasuredRun, need

TOOL = "guidellm"
_METRICS = {"ttft": ("time_to_first_token_ms", 1.0), "tpot": ("time_per_output_token_ms", 1.0),
            "itl": ("inter_token_latency_ms", 1.0), "e2e": ("request_latency", 1e3)}


def looks_like(data: Any) -> bool:
    return (isinstance(data, dict) and isinstance(data.get("benchmarks"), list)
            and all(isinstance(b, dict) and "metrics" in b for b in data["benchmarks"]))


def _successful(metrics: dict, key: str, where: str) -> dict:
    summary = need(metrics, key, Path(where), TOOL, "metrics.")
    ok = summary.get("successful") if isinstance(summary, dict) else None
    if not isinstance(ok, dict):
        raise ServesimError(f"{where}: metrics.{key} has no 'successful' summary")
    return ok


def _stats(ok: dict, scale: float) -> dict[str, float | None]:
    pct = ok.get("percentiles") or {}

    def scaled(v):
        return None if v is None else float(v) * scale
    return {"mean": scaled(ok.get("mean")), "median": scaled(ok.get("median")), "p90": scaled(pct.get("p90")),
            "p99": scaled(pct.get("p99"))}


def read_all(data: dict, path: Path) -> list[MeasuredRun]:
    if not data["benchmarks"]:
        raise ServesimError(f"{path}: this guidellm report holds no benchmarks")
    return [_read_one(bench, path, index) for index, bench in enumerate(data["benchmarks"])]


def _read_one(bench: dict, path: Path, index: int) -> MeasuredRun:
    where = f"{path} benchmark {index}"
    metrics = bench["metrics"]
    totals = metrics.get("request_totals") or {}
    completed = int(totals.get("successful") or 0)
    failed = int(totals.get("errored") or 0) + int(totals.get("incomplete") or 0)
    run = MeasuredRun(tool="guidellm", path=path, label=f"{path.name}#{index}", num_requests=completed + failed,
                      completed=completed, failed=failed)
    strategy = (bench.get("config") or {}).get("strategy") or {}
    kind = strategy.get("type_")
    if kind == "synchronous":
        run.request_rate, run.max_concurrency = "inf", 1
    elif kind == "concurrent":
        run.request_rate, run.max_concurrency = "inf", int(need(strategy, "streams", Path(where), TOOL,
                                                               "config.strategy."))
    elif kind in ("constant", "poisson"):
        run.request_rate = float(need(strategy, "rate", Path(where), TOOL, "config.strategy."))
        run.burstiness = "inf" if kind == "constant" else 1.0
    elif kind == "throughput":
        run.request_rate = "inf"
    else:
        raise ServesimError(f"{where}: strategy {kind!r} cannot be rebuilt (servesim reads synchronous, "
                            "concurrent, throughput, constant and poisson)")
    run.duration_s = bench.get("duration")
    run.mean_input_length = _successful(metrics, "prompt_token_count", where).get("mean")
    run.mean_output_length = _successful(metrics, "output_token_count", where).get("mean")
    for metric, (key, scale) in _METRICS.items():
        run.stats[metric] = _stats(_successful(metrics, key, where), scale)
    run.rates = {"request_throughput": _successful(metrics, "requests_per_second", where).get("mean"),
                 "output_throughput": _successful(metrics, "output_tokens_per_second", where).get("mean"),
                 "total_token_throughput": _successful(metrics, "tokens_per_second", where).get("mean")}
    return run
