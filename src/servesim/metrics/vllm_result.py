"""`--format vllm`: result.json as vLLM 0.32's `vllm bench serve --save-result` writes it.

Keys, order and units follow vllm/benchmarks/serve.py of vLLM 0.32.0: `main_async`
builds the set-up keys (date, endpoint_type, backend, label, model_id, tokenizer_id,
num_prompts, request_rate, burstiness, max_concurrency, the ramp-up keys when a ramp is
set), merged with what `benchmark` returns (duration in s, counts, throughputs, the
per-request arrays, max_output_tokens_per_s, max_concurrent_requests, rtfx, then
mean/median/std/pXX per metric in ms, and the client-queue metrics when a
max_concurrency is set). Without `--save-detailed` it drops input_lens, output_lens,
start_times, ttfts, itls, generated_texts and errors, and keeps latencies and
queue_times, as vLLM does.

servesim reports percentiles of ttft, tpot, itl and e2el (vLLM's
`--percentile-metrics ttft,tpot,itl,e2el`) at `--metric-percentiles`. What a simulator
has no value for is written as vLLM writes it when empty: "" generated texts, 0.0 rtfx,
"" errors for requests that succeeded, 0.0 for the statistics of an empty metric.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import numpy as np

from servesim.metrics.records import RequestTable
from servesim.metrics.run_warnings import is_closed_loop
from servesim.metrics.summary import percentile_word

VLLM_VERSION = "0.32.0"
# Keys that `--save-detailed` adds (vLLM deletes them otherwise).
DETAILED_KEYS = ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors")
METRICS = (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2el", "e2e"))   # vLLM name, summary name


def _date() -> str:
    """vLLM's `%Y%m%d-%H%M%S` of now (local time there; UTC here), or of $SOURCE_DATE_EPOCH."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    moment = time.gmtime(int(epoch)) if epoch and epoch.isdigit() else time.gmtime()
    return time.strftime("%Y%m%d-%H%M%S", moment)


def _traffic(client) -> tuple[Any, float, int | None, dict]:
    """(request_rate, burstiness, max_concurrency, ramp-up keys) in vLLM's terms.

    An open-loop trace replay has no rate setting: its mean offered rate is reported by the
    caller; a closed loop is vLLM's `--request-rate inf --max-concurrency C`."""
    mode = client.mode
    if mode == "poisson":
        return client.rate, 1.0, None, {}
    if mode == "closed_loop":
        return "inf", 1.0, client.concurrency, {}
    if mode == "bench":
        rate = float(client.request_rate)
        ramp = {}
        if getattr(client, "ramp_up_strategy", None) is not None:
            ramp = {"ramp_up_strategy": client.ramp_up_strategy, "ramp_up_start_rps": client.ramp_up_start_rps,
                    "ramp_up_end_rps": client.ramp_up_end_rps}
        return ("inf" if math.isinf(rate) else rate), float(client.burstiness), client.max_concurrency, ramp
    return None, 1.0, None, {}


def _offered_rate(arrival_ns: np.ndarray) -> Any:
    span = int(arrival_ns.max()) - int(arrival_ns.min()) if arrival_ns.size else 0
    return "inf" if span <= 0 else float(arrival_ns.size / (span / 1e9))


def _metric(values_ms: np.ndarray | None, summary: dict, name: str, key: str, percentiles) -> dict:
    """mean/median/std/pXX of one metric in ms: from `values_ms` when given, else the summary's."""
    out = {}
    if values_ms is not None:
        data = values_ms if values_ms.size else np.zeros(1)   # vLLM: np.mean(values or 0)
        out[f"mean_{name}_ms"] = float(np.mean(data))
        out[f"median_{name}_ms"] = float(np.median(data))
        out[f"std_{name}_ms"] = float(np.std(data))
        for q in percentiles:
            out[f"p{percentile_word(q)}_{name}_ms"] = float(np.percentile(data, q))
        return out
    for stat in ("mean", "median", "std"):
        out[f"{stat}_{name}_ms"] = summary.get(f"{stat}_{key}_ms") or 0.0
    for q in percentiles:
        out[f"p{percentile_word(q)}_{name}_ms"] = summary.get(f"p{percentile_word(q)}_{key}_ms") or 0.0
    return out


def build_result(summary: dict, records: RequestTable, config, model_id: str, percentiles,
                 token_times: dict | None = None, save_detailed: bool = False) -> dict[str, Any]:
    """result.json's mapping. `token_times` (request id → delivery times ns, Collector.token_times)
    gives the per-request itls and exact ITL statistics; without it the ITL figures are the
    summary's (histogram percentiles within 0.5%)."""
    warmup = config.workload.warmup_requests
    order = records.id_order()

    def column(name: str) -> np.ndarray:
        return records.column(name)[order]

    ids = column("request_id")
    measured = ids >= warmup
    ids = ids[measured]
    ok = column("status")[measured] != 2
    arrival = column("arrival_ns")[measured]
    first = column("first_token_ns")[measured]
    finish = column("finish_ns")[measured]
    output = np.where(ok, column("output_length")[measured], 0)
    origin = int(arrival.min()) if arrival.size else 0
    ttft_s = np.where(ok, (first - arrival) / 1e9, 0.0)
    latency_s = np.where(ok, (finish - arrival) / 1e9, 0.0)
    itls = None
    if token_times is not None:
        itls = [np.diff(np.frombuffer(token_times[i], dtype=np.int64)) / 1e9 if i in token_times and good
                else np.zeros(0) for i, good in zip(ids.tolist(), ok.tolist())]

    rate, burstiness, max_concurrency, ramp = _traffic(config.workload.client)
    if rate is None:
        rate = _offered_rate(arrival)
    closed = is_closed_loop(config.workload.client)
    # vLLM's client queue: waiting for the max_concurrency semaphore. With request_rate inf every
    # request is due at the start, so a closed loop's queue time is its send time.
    queue_s = (arrival - origin) / 1e9 if closed else np.zeros(len(ids))
    duration_s = summary["duration_ms"] / 1e3

    def per_second(x) -> float:
        return x / duration_s if duration_s > 0 else 0.0

    slo = config.slo
    has_goodput = any(v is not None for v in (slo.ttft_ms, slo.tpot_ms, slo.e2e_ms))
    result: dict[str, Any] = {
        "date": _date(), "endpoint_type": "openai", "backend": "openai", "label": None,
        "model_id": model_id, "tokenizer_id": model_id, "num_prompts": int(len(ids)),
        "request_rate": rate, "burstiness": burstiness, "max_concurrency": max_concurrency, **ramp,
        "duration": duration_s,
        "completed": summary["completed"],
        "failed": summary["failed_requests"],
        "total_input_tokens": summary["total_input_tokens"],
        "total_output_tokens": summary["total_output_tokens"],
        "request_throughput": per_second(summary["completed"]),
        "request_goodput": per_second(summary["good_requests"]) if has_goodput else None,
        "output_throughput": per_second(summary["total_output_tokens"]),
        "total_token_throughput": per_second(summary["total_input_tokens"] + summary["total_output_tokens"]),
        "input_lens": column("input_length")[measured].tolist(),
        "output_lens": output.tolist(),
        "ttfts": ttft_s.tolist(),
        "itls": [gaps.tolist() for gaps in itls] if itls is not None else [[] for _ in range(len(ids))],
        "latencies": latency_s.tolist(),
        "start_times": ((arrival - origin) / 1e9).tolist(),
        "queue_times": queue_s.tolist(),
        "generated_texts": [""] * len(ids),
        "errors": [records.errors.get(i, "") for i in ids.tolist()],
        "max_output_tokens_per_s": summary.get("max_output_tokens_per_s", 0.0),
        "max_concurrent_requests": summary.get("max_concurrent_requests", 0),
        "rtfx": 0.0,
    }
    for name, key in METRICS:
        if name == "itl" and itls is not None:
            values = np.concatenate(itls) * 1e3 if itls else np.zeros(0)
        else:
            values = None
        result.update(_metric(values, summary, name, key, percentiles))
    if max_concurrency is not None:
        result.update(_metric(queue_s[ok] * 1e3, summary, "client_queue_time", "", percentiles))
        if rate != "inf":
            result.update(_metric((latency_s + queue_s)[ok] * 1e3, summary, "e2el_including_client_queue", "",
                                  percentiles))
    if not save_detailed:
        for key in DETAILED_KEYS:
            del result[key]
    return result


# --format's values: servesim's own files, or also result.json as `vllm bench serve` writes it
# (an output format named after vLLM's benchmark, whatever engine.backend ran).
SERVESIM_FORMAT, VLLM_BENCH_FORMAT = "servesim", "vllm"


def check_report_options(fmt: str, save_detailed: bool, out, metric_percentiles: str) -> tuple[float, ...]:
    """`servesim run`'s --format, --save-detailed and --metric-percentiles; the percentiles."""
    from servesim.errors import ServesimError
    from servesim.metrics.summary import parse_percentiles

    if fmt not in (SERVESIM_FORMAT, VLLM_BENCH_FORMAT):
        raise ServesimError(f"--format must be servesim or vllm, got {fmt!r}")
    if fmt == VLLM_BENCH_FORMAT and out is None:
        raise ServesimError("--format vllm writes result.json into the --out folder; give --out DIR too")
    if save_detailed and fmt != VLLM_BENCH_FORMAT:
        raise ServesimError("--save-detailed adds per-request arrays to result.json; give --format vllm too")
    return parse_percentiles(metric_percentiles)


def write_result(path, result, percentiles, save_detailed: bool) -> None:
    """result.json of a finished `simulate` run, in one line as vLLM dumps it."""
    import json

    data = build_result(result.summary, result.requests, result.config, result.summary["simulated"]["model_id"],
                        percentiles, result.token_times, save_detailed)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
