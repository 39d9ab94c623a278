"""genai-perf's profile_export_genai_perf.json and profile_export.json (perf_analyzer repository,
genai-perf/genai_perf/export_data/json_exporter.py, genai-perf 0.0.x).

`JsonExporter` writes the LLM statistics — one object per metric with a `unit` and avg, p25,
p50, p75, p90, p95, p99, min, max, std: request_throughput, request_latency,
time_to_first_token, inter_token_latency (per request (latency − TTFT) / (output − 1):
vLLM's TPOT), output_token_throughput, output_sequence_length, input_sequence_length — and
`input_config`, the command's arguments (model, concurrency, request_rate, request_count or
num_prompts, synthetic_input_tokens_mean, output_tokens_mean, backend). aiperf inherited this
shape, so both are read by the same helpers.

profile_export.json is perf_analyzer's per-request export: experiments[0].requests, each with
timestamp (ns, when sent) and response_timestamps (ns, one per streamed response). It holds no
token counts, so lengths stay the summary's means; its times give start times, TTFT, E2E and
the gaps between responses (ITL).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servesim.errors import ServesimError
from servesim.validate.measured import MeasuredRun, engine_named, need
from servesim.validate.readers.aiperf import avg, summary_stats

TOOL = "genai-perf"
SUMMARY_NAME, RECORDS_NAME = "profile_export_genai_perf.json", "profile_export.json"
_TAGS = {"ttft": "time_to_first_token", "tpot": "inter_token_latency", "e2e": "request_latency"}


def looks_like(data: Any) -> bool:
    return (isinstance(data, dict) and "aiperf_version" not in data and isinstance(data.get("input_config"), dict)
            and isinstance(data.get("time_to_first_token"), dict))


def looks_like_records(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("experiments"), list)


def read(data: dict, path: Path) -> MeasuredRun:
    config = data["input_config"]
    count = config.get("request_count") or config.get("num_prompts") or config.get("num_dataset_entries")
    if not count:
        need({}, "input_config.request_count", path, TOOL)
    model = config.get("model")
    backend = config.get("backend")
    run = MeasuredRun(tool="genai-perf", path=path, label=path.parent.name + "/" + path.name,
                      num_requests=int(count), completed=int(count),
                      model=model[0] if isinstance(model, list) and model else model,
                      engine=engine_named(backend))
    if config.get("request_rate"):
        run.request_rate, run.burstiness = float(config["request_rate"]), 1.0
    else:
        run.request_rate, run.max_concurrency = "inf", int(config.get("concurrency") or 1)
    run.rates = {"request_throughput": avg(data, "request_throughput"),
                 "output_throughput": avg(data, "output_token_throughput"), "total_token_throughput": None}
    run.mean_input_length = avg(data, "input_sequence_length") or config.get("synthetic_input_tokens_mean")
    run.mean_output_length = avg(data, "output_sequence_length") or config.get("output_tokens_mean")
    if run.mean_input_length is None or run.mean_output_length is None:
        need({}, "input_sequence_length" if run.mean_input_length is None else "output_sequence_length",
             path, TOOL)
    run.stats = summary_stats(data, _TAGS, path)
    records = path.with_name(RECORDS_NAME)
    if records.is_file():
        with open(records, encoding="utf-8") as fh:
            attach_records(run, json.load(fh), records)
    return run


def attach_records(run: MeasuredRun, data: dict, path: Path) -> None:
    experiments = data.get("experiments") or []
    requests = experiments[0].get("requests") if experiments and isinstance(experiments[0], dict) else None
    if not requests:
        raise ServesimError(f"{path} holds no requests (experiments[0].requests)")
    rows = sorted((r for r in requests if r.get("response_timestamps")), key=lambda r: r["timestamp"])
    if not rows:
        raise ServesimError(f"{path}: no request has response_timestamps")
    origin = rows[0]["timestamp"]
    run.start_times = [(r["timestamp"] - origin) / 1e9 for r in rows]
    run.ttfts = [(r["response_timestamps"][0] - r["timestamp"]) / 1e9 for r in rows]
    run.latencies = [(r["response_timestamps"][-1] - r["timestamp"]) / 1e9 for r in rows]
    run.itls = [[(b - a) / 1e9 for a, b in zip(r["response_timestamps"], r["response_timestamps"][1:])]
                for r in rows]
    run.duration_s = (max(r["response_timestamps"][-1] for r in rows) - origin) / 1e9
