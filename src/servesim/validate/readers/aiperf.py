"""aiperf's profile_export_aiperf.json and profile_export.jsonl (aiperf 0.13.0).

The summary is `JsonExportData` (aiperf/common/models/export_models.py, schema 1.4, written by
exporters/metrics_json_exporter.py): each metric is a top-level object named by its tag with
a `unit` and avg, p50, p90, p99 (among others): time_to_first_token, inter_token_latency
(per request (latency − TTFT) / (output − 1): vLLM's TPOT), inter_chunk_latency (the gaps
between streamed chunks: vLLM's ITL), request_latency, request_throughput,
output_token_throughput, benchmark_duration (s), request_count, error_request_count,
input_sequence_length and output_sequence_length; `input_config` is the run's
BenchmarkConfig (models, and phases whose profiling phase has a type — concurrency,
poisson, constant, ... —, concurrency, rate and requests; config/phases.py).

profile_export.jsonl holds one `MetricRecordInfo` per request (common/models/record_models.py):
metadata.request_start_ns, benchmark_phase ("warmup" or "profiling"), metrics {tag: {value,
unit}} with the same tags per request, and `error` when it failed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servesim.errors import ServesimError
from servesim.validate.measured import MeasuredRun, need
from servesim.validate.readers.units import to_ms

TOOL = "aiperf"
SUMMARY_NAME, RECORDS_NAME = "profile_export_aiperf.json", "profile_export.jsonl"
_TAGS = {"ttft": "time_to_first_token", "tpot": "inter_token_latency", "itl": "inter_chunk_latency",
         "e2e": "request_latency"}
_STATS = {"mean": "avg", "median": "p50", "p90": "p90", "p99": "p99"}


def looks_like(data: Any) -> bool:
    return isinstance(data, dict) and "aiperf_version" in data


def looks_like_record(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("metadata"), dict) and "request_start_ns" in data[
        "metadata"] and isinstance(data.get("metrics"), dict)


def summary_stats(data: dict, tags: dict[str, str], path: Path) -> dict[str, dict[str, float | None]]:
    """{metric: {stat: ms}} from genai-perf-shaped metric objects (aiperf keeps genai-perf's shape)."""
    out: dict[str, dict[str, float | None]] = {}
    for metric, tag in tags.items():
        obj = data.get(tag)
        if not isinstance(obj, dict):
            continue
        out[metric] = {stat: to_ms(obj.get(key), obj.get("unit", "ms"), f"{path}: {tag}")
                       for stat, key in _STATS.items()}
    return out


def avg(data: dict, tag: str) -> float | None:
    obj = data.get(tag)
    return obj.get("avg") if isinstance(obj, dict) else None


def _model(config: dict) -> str | None:
    models = config.get("models")
    if isinstance(models, str):
        return models
    if isinstance(models, list) and models:
        return models[0] if isinstance(models[0], str) else models[0].get("name")
    if isinstance(models, dict) and models.get("items"):
        return models["items"][0].get("name")
    return None


def _profiling_phase(config: dict) -> dict:
    phases = config.get("phases")
    if isinstance(phases, dict):
        phases = list(phases.values())
    for phase in phases or []:
        if isinstance(phase, dict) and not phase.get("exclude_from_results"):
            return phase
    profiling = config.get("profiling")
    return profiling if isinstance(profiling, dict) else {}


def read(data: dict, path: Path) -> MeasuredRun:
    count = avg(data, "request_count")
    if count is None:
        need({}, "request_count", path, TOOL)
    errors = int(avg(data, "error_request_count") or 0)
    config = data.get("input_config") or {}
    phase = _profiling_phase(config)
    run = MeasuredRun(tool="aiperf", path=path, label=path.parent.name + "/" + path.name,
                      num_requests=int(count) + errors, completed=int(count), failed=errors, model=_model(config))
    kind = phase.get("type")
    if kind == "concurrency" or (phase.get("concurrency") and not phase.get("rate")):
        run.request_rate, run.max_concurrency = "inf", int(phase.get("concurrency") or 1)
    elif phase.get("rate"):
        run.request_rate = float(phase["rate"])
        run.burstiness = "inf" if kind == "constant" else 1.0
        run.max_concurrency = phase.get("concurrency")
    duration = avg(data, "benchmark_duration")
    if duration is None:
        need({}, "benchmark_duration", path, TOOL)
    run.duration_s = to_ms(duration, data["benchmark_duration"].get("unit", "sec"), str(path)) / 1e3
    run.rates = {"request_throughput": avg(data, "request_throughput"),
                 "output_throughput": avg(data, "output_token_throughput"), "total_token_throughput": None}
    run.mean_input_length = avg(data, "input_sequence_length")
    run.mean_output_length = avg(data, "output_sequence_length")
    if run.mean_input_length is None or run.mean_output_length is None:
        need({}, "input_sequence_length" if run.mean_input_length is None else "output_sequence_length",
             path, TOOL)
    run.stats = summary_stats(data, _TAGS, path)
    records = path.with_name(RECORDS_NAME)
    if records.is_file():
        attach_records(run, records)
    return run


def read_records_file(path: Path) -> MeasuredRun:
    """profile_export.jsonl on its own (its summary beside it is read when there)."""
    summary = path.with_name(SUMMARY_NAME)
    if summary.is_file():
        with open(summary, encoding="utf-8") as fh:
            return read(json.load(fh), summary)
    run = MeasuredRun(tool="aiperf", path=path, label=path.parent.name + "/" + path.name, num_requests=0,
                      completed=0)
    attach_records(run, path)
    run.mean_input_length = sum(run.input_lens) / len(run.input_lens) if run.input_lens else None
    return run


def _value(metrics: dict, tag: str, line: int, path: Path) -> float | None:
    obj = metrics.get(tag)
    if not isinstance(obj, dict):
        return None
    value = obj.get("value")
    if isinstance(value, list):
        return [to_ms(v, obj.get("unit", "ms"), f"{path} line {line}") / 1e3 for v in value]
    return None if value is None else to_ms(value, obj.get("unit", "ms"), f"{path} line {line}") / 1e3


def attach_records(run: MeasuredRun, path: Path) -> None:
    """Per-request lengths, send times and measurements from profile_export.jsonl (profiling phase)."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line, text in enumerate(fh, 1):
            if not text.strip():
                continue
            try:
                rec = json.loads(text)
            except json.JSONDecodeError:
                raise ServesimError(f"{path} line {line} is not JSON") from None
            if not looks_like_record(rec):
                raise ServesimError(f"{path} line {line} is not an aiperf per-request record (no metadata."
                                    "request_start_ns)")
            if rec["metadata"].get("benchmark_phase", "profiling") != "profiling":
                continue
            rows.append((rec, line))
    if not rows:
        raise ServesimError(f"{path} holds no profiling-phase requests")
    rows.sort(key=lambda r: r[0]["metadata"]["request_start_ns"])
    origin = rows[0][0]["metadata"]["request_start_ns"]
    run.input_lens, run.output_lens, run.start_times = [], [], []
    run.ttfts, run.latencies, run.ok_output_lens, run.itls = [], [], [], []
    for rec, line in rows:
        metrics = rec["metrics"]
        isl, osl = metrics.get("input_sequence_length"), metrics.get("output_sequence_length")
        if not isinstance(isl, dict):
            raise ServesimError(f"{path} line {line}: the record has no 'input_sequence_length', which the "
                                "comparison needs")
        run.input_lens.append(int(isl["value"]))
        run.output_lens.append(int(osl["value"]) if isinstance(osl, dict) else 0)
        run.start_times.append((rec["metadata"]["request_start_ns"] - origin) / 1e9)
        if rec.get("error") is None:
            run.ttfts.append(_value(metrics, "time_to_first_token", line, path) or 0.0)
            run.latencies.append(_value(metrics, "request_latency", line, path) or 0.0)
            run.ok_output_lens.append(run.output_lens[-1])
            run.itls.append(_value(metrics, "inter_chunk_latency", line, path) or [])
    if run.num_requests == 0:
        run.num_requests = len(rows)
        run.completed = len(run.ttfts)
        run.failed = run.num_requests - run.completed
