"""SGLang `bench_serving --output-file` JSONL (sglang 0.5.23, sglang/benchmark/serving.py).

`benchmark` appends one JSON line per run to the output file: the arguments (backend,
dataset_name, request_rate — "trace" when replaying timestamps —, max_concurrency,
random_input_len, random_output_len, random_range_ratio), then duration (s), completed,
total_input_tokens, total_output_tokens, request_throughput, input_throughput,
output_throughput, total_throughput, and mean/median/std/p90/p95/p99 of e2e_latency, ttft,
tpot and itl in ms. `--output-details` adds input_lens, output_lens, ttfts (s), itls (s),
generated_texts and errors. It records no prompt count and no failure count: without details,
the requests sent are taken to be the completed ones. Its random dataset
(datasets/common.py compute_random_lens) draws lengths uniform in [max(int(L·r), 1), L].
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servesim.validate.measured import METRICS, MeasuredRun, engine_named, need, number

TOOL = "SGLang bench_serving"
_NAMES = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e": "e2e_latency"}


def looks_like(data: Any) -> bool:
    return isinstance(data, dict) and "dataset_name" in data and "mean_e2e_latency_ms" in data


def read(data: dict, path: Path, label: str) -> MeasuredRun:
    completed = int(number(need(data, "completed", path, TOOL), path, "completed"))
    engine = engine_named(data.get("backend"))
    rate = data.get("request_rate")
    run = MeasuredRun(tool="sglang", path=path, label=label, num_requests=completed, completed=completed,
                      engine=engine, request_rate="inf" if rate == float("inf") else rate,
                      burstiness=1.0, max_concurrency=data.get("max_concurrency"))
    if rate == "trace":
        run.request_rate = None
        run.notes.append("request_rate 'trace': the recorded timestamps are not in the file; requests "
                         "are sent all at once")
    server = data.get("server_info")
    if isinstance(server, dict):
        run.model = server.get("model_path") or server.get("served_model_name")
    run.duration_s = number(need(data, "duration", path, TOOL), path, "duration")
    run.rates = {"request_throughput": data.get("request_throughput"),
                 "output_throughput": data.get("output_throughput"),
                 "total_token_throughput": data.get("total_throughput")}
    if completed:
        run.mean_input_length = number(need(data, "total_input_tokens", path, TOOL), path, "total_input_tokens") / completed
        run.mean_output_length = number(need(data, "total_output_tokens", path, TOOL), path,
                                        "total_output_tokens") / completed
    if str(data.get("dataset_name", "")).startswith("random") and data.get("random_input_len"):
        run.random_lengths = {"input_len": data["random_input_len"], "output_len": data["random_output_len"],
                              "range_ratio": data.get("random_range_ratio", 0.0), "rule": "fraction_to_full"}
    for metric in METRICS:
        name = _NAMES[metric]
        run.stats[metric] = {stat: data.get(f"{stat}_{name}_ms") for stat in ("mean", "median", "p90", "p99")}
    _read_details(data, run)
    return run


def _read_details(data: dict, run: MeasuredRun) -> None:
    if not isinstance(data.get("input_lens"), list) or not isinstance(data.get("ttfts"), list):
        return
    errors = data.get("errors") or [""] * len(data["input_lens"])
    ok = [not e for e in errors]
    run.input_lens = [int(v) for v in data["input_lens"]]
    run.output_lens = [int(v) for v in data.get("output_lens") or []] or None
    run.num_requests = len(run.input_lens)
    run.failed = run.num_requests - run.completed
    run.ttfts = [t for t, good in zip(data["ttfts"], ok) if good]
    if isinstance(data.get("itls"), list):
        run.itls = [g for g, good in zip(data["itls"], ok) if good]
    if run.output_lens is not None:
        run.ok_output_lens = [n for n, good in zip(run.output_lens, ok) if good]
