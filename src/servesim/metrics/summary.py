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
from servesim.metrics.records import RequestRecord

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


def summarize(records: list[RequestRecord], itl: LogHistogram, slo: SloConfig) -> dict:
    done = [r for r in records if r.completed]
    failed = len(records) - len(done)
    first_arrival = min((r.arrival_ns for r in records), default=0)
    last_finish = max((r.finish_ns for r in records if r.finish_ns is not None), default=first_arrival)
    duration_ns = max(last_finish - first_arrival, 0)
    duration_s = duration_ns / 1e9
    n = len(done)
    ttft = np.array([r.ttft_ns for r in done], dtype=np.float64) / 1e6
    e2e = np.array([r.e2e_ns for r in done], dtype=np.float64) / 1e6
    multi = [r for r in done if r.output_length > 1]
    tpot = np.array([r.tpot_ns for r in multi], dtype=np.float64) / 1e6
    input_tokens = sum(r.input_length for r in done)
    output_tokens = sum(r.output_length for r in done)
    cached = sum(r.cached_tokens for r in done)

    good = np.ones(n, dtype=bool)
    if slo.ttft_ms is not None:
        good &= ttft <= slo.ttft_ms
    if slo.e2e_ms is not None:
        good &= e2e <= slo.e2e_ms
    if slo.tpot_ms is not None:
        # A one-token request has no TPOT and meets the SLO trivially.
        per_request_tpot = np.array(
            [(r.tpot_ns / 1e6) if r.output_length > 1 else 0.0 for r in done], dtype=np.float64
        )
        good &= per_request_tpot <= slo.tpot_ms
    good_output = int(sum(r.output_length for r, ok in zip(done, good) if ok))

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
        "preempted_requests": sum(1 for r in done if r.preemptions > 0),
    }
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in summary.items()}
