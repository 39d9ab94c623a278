"""Run summaries in the vocabulary of `vllm bench serve`.

TTFT, TPOT and E2E percentiles are exact (numpy's linear interpolation, as
vllm bench uses); ITL percentiles come from a histogram within 0.5% relative
error, its mean is exact. Goodput counts requests that meet every SLO set.
"""

from __future__ import annotations

import math

import numpy as np

from servesim.config import SloConfig
from servesim.metrics.histogram import LogHistogram
from servesim.metrics.records import RequestTable

PERCENTILES = (50, 90, 99)


def _stats(name: str, values_ms: np.ndarray) -> dict[str, float | None]:
    if values_ms.size == 0:
        return {f"mean_{name}_ms": None, f"median_{name}_ms": None, f"std_{name}_ms": None,
                **{f"p{q}_{name}_ms": None for q in PERCENTILES if q != 50}}
    out = {
        f"mean_{name}_ms": float(values_ms.mean()),
        f"median_{name}_ms": float(np.percentile(values_ms, 50)),
        f"std_{name}_ms": float(values_ms.std()),
    }
    for q in PERCENTILES:
        if q != 50:
            out[f"p{q}_{name}_ms"] = float(np.percentile(values_ms, q))
    return out


def _hist_stats(name: str, hist: LogHistogram) -> dict[str, float | None]:
    if hist.count == 0:
        return {f"mean_{name}_ms": None, f"median_{name}_ms": None,
                **{f"p{q}_{name}_ms": None for q in PERCENTILES if q != 50}}
    out = {f"mean_{name}_ms": hist.mean / 1e6, f"median_{name}_ms": hist.percentile(50) / 1e6}
    for q in PERCENTILES:
        if q != 50:
            out[f"p{q}_{name}_ms"] = hist.percentile(q) / 1e6
    return out


def summarize(table: RequestTable, itl: LogHistogram, slo: SloConfig, warmup: int = 0) -> dict:
    # In request-id order: float sums must not depend on the order requests completed in
    # (equal-time completions on different workers may be processed in either order).
    order = table.id_order()

    def column(name: str) -> np.ndarray:
        return table.column(name)[order]

    status = column("status")
    # Warm-up requests (the first `warmup` ids) are left out of every figure here (the ITL
    # histogram, filled pass by pass, leaves their gaps out too); they still load the engine.
    measured = column("request_id") >= warmup if warmup else np.ones(len(table), dtype=bool)
    done = measured & (status != 2)  # not rejected
    arrival_all = column("arrival_ns")
    finish_all = column("finish_ns")
    arrival = arrival_all[measured]
    finish = finish_all[measured]
    first_token = column("first_token_ns")[done]
    out_len = column("output_length")[done]
    in_len = column("input_length")[done]
    n = int(done.sum())
    failed = int(measured.sum()) - n
    first_arrival = int(arrival.min()) if arrival.size else 0
    finished = finish[finish >= 0]
    last_finish = int(finished.max()) if finished.size else first_arrival
    duration_ns = max(last_finish - first_arrival, 0)
    duration_s = duration_ns / 1e9
    ttft = (first_token - arrival_all[done]) / 1e6
    e2e = (finish_all[done] - arrival_all[done]) / 1e6
    multi = out_len > 1
    with np.errstate(divide="ignore", invalid="ignore"):
        per_request_tpot = np.where(multi, (finish_all[done] - first_token) / np.maximum(out_len - 1, 1) / 1e6, 0.0)
    tpot = per_request_tpot[multi]
    input_tokens = int(in_len.sum())
    output_tokens = int(out_len.sum())
    cached = int(column("cached_tokens")[done].sum())
    host_cached = int(column("host_cached_tokens")[done].sum())

    good = np.ones(n, dtype=bool)
    if slo.ttft_ms is not None:
        good &= ttft <= slo.ttft_ms
    if slo.e2e_ms is not None:
        good &= e2e <= slo.e2e_ms
    if slo.tpot_ms is not None:
        # A one-token request has no TPOT and meets the SLO trivially.
        good &= per_request_tpot <= slo.tpot_ms
    good_output = int(out_len[good].sum())

    def rate(x: float) -> float | None:
        return x / duration_s if duration_s > 0 else None

    summary = {
        "completed": n,
        "failed_requests": failed,
        "total_input_tokens": input_tokens,
        "total_output_tokens": output_tokens,
        "duration_ms": duration_ns / 1e6,
        "request_throughput_req_s": rate(n),
        "input_throughput_tok_s": rate(input_tokens),
        "output_throughput_tok_s": rate(output_tokens),
        "total_token_throughput_tok_s": rate(input_tokens + output_tokens),
        **_stats("ttft", ttft),
        **_stats("tpot", tpot),
        **_hist_stats("itl", itl),
        **_stats("e2e", e2e),
        "good_requests": int(good.sum()),
        "request_goodput_req_s": rate(int(good.sum())),
        "goodput_output_throughput_tok_s": rate(good_output),
        "prefix_cache_hit_rate": cached / input_tokens if input_tokens else None,
        "host_cache_hit_rate": host_cached / input_tokens if input_tokens else None,
        "preempted_requests": int((column("preemptions")[done] > 0).sum()),
    }
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in summary.items()}
