"""Run summaries in the vocabulary of `vllm bench serve`.

TTFT, TPOT and E2E percentiles are exact (numpy's linear interpolation, as
vllm bench uses); ITL percentiles come from a histogram within 0.5% relative
error, its mean, standard deviation, minimum and maximum are exact. Keys are
spelt as vllm bench writes them (`p99.9_ttft_ms`); `median_*` is kept beside
`p50_*`. Goodput counts requests that meet every SLO set.
"""

from __future__ import annotations

import math

import numpy as np

from servesim.config import SloConfig
from servesim.errors import ServesimError
from servesim.metrics.histogram import LogHistogram
from servesim.metrics.records import RequestTable

NS_PER_S = 1_000_000_000

DEFAULT_PERCENTILES = (50.0, 90.0, 95.0, 99.0)


def percentile_word(q: float) -> str:
    """How vllm bench spells a percentile in its keys: 99 -> "99", 99.9 -> "99.9"."""
    return str(int(q)) if int(q) == q else str(q)


def parse_percentiles(text: str) -> tuple[float, ...]:
    """`--metric-percentiles 50,90,99.9` (vllm bench serve's spelling) as sorted, distinct values."""
    values = []
    for part in text.split(","):
        part = part.strip()
        try:
            value = float(part)
        except ValueError:
            value = math.nan
        if not 0 < value <= 100:   # also refuses nan and inf
            raise ServesimError(f"--metric-percentiles: {part!r} is not a percentile in (0, 100]; "
                                "give a comma-separated list such as 50,90,99.9")
        values.append(value)
    return tuple(sorted(set(values)))


def check_percentiles(percentiles) -> tuple[float, ...]:
    """The `percentiles=` argument of simulate(): numbers in (0, 100]."""
    if isinstance(percentiles, (str, bytes)) or not hasattr(percentiles, "__iter__"):
        raise ServesimError(f"percentiles must be a list of numbers in (0, 100], got {percentiles!r}")
    out = []
    for q in percentiles:
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 < q <= 100:
            raise ServesimError(f"percentiles must be numbers in (0, 100], got {q!r}")
        out.append(float(q))
    if not out:
        raise ServesimError("percentiles must name at least one percentile")
    return tuple(sorted(set(out)))


def _keys(name: str, percentiles) -> list[str]:
    return ([f"mean_{name}_ms", f"median_{name}_ms", f"std_{name}_ms", f"min_{name}_ms", f"max_{name}_ms"]
            + [f"p{percentile_word(q)}_{name}_ms" for q in percentiles])


def _stats(name: str, values_ms: np.ndarray, percentiles) -> dict[str, float | None]:
    if values_ms.size == 0:
        return dict.fromkeys(_keys(name, percentiles))
    ordered = np.sort(values_ms).tolist()
    out = {
        f"mean_{name}_ms": float(values_ms.mean()),
        f"median_{name}_ms": linear_percentile(ordered, 50),
        f"std_{name}_ms": float(values_ms.std()),
        f"min_{name}_ms": float(values_ms.min()),
        f"max_{name}_ms": float(values_ms.max()),
    }
    for q in percentiles:
        out[f"p{percentile_word(q)}_{name}_ms"] = linear_percentile(ordered, q)
    return out


def linear_percentile(ordered: list[float], q: float) -> float:
    """`float(np.percentile(values, q))` of the sorted values, the same float, computed as numpy 2 does
    (method "linear": index (n - 1)·q/100, its neighbours, numpy's two-sided lerp).

    np.percentile partitions around `np.unique` of the indexes, and np.unique's first call imports
    numpy.ma: 49M instructions, 4% of a one-request run. tests/test_summary_percentile.py holds this
    to np.percentile.
    """
    n = len(ordered)
    virtual = (n - 1) * (q / 100)
    if virtual >= n - 1:   # numpy takes the last value on both sides, at index -1
        low = high = -1
    else:
        low = math.floor(virtual)
        high = low + 1
    if math.isnan(ordered[-1]):   # NaN sorts last; numpy's answer is NaN
        return math.nan
    a, b, t = ordered[low], ordered[high], virtual - low
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


def _hist_stats(name: str, hist: LogHistogram, percentiles) -> dict[str, float | None]:
    if hist.count == 0:
        return dict.fromkeys(_keys(name, percentiles))
    out = {f"mean_{name}_ms": hist.mean / 1e6, f"median_{name}_ms": hist.percentile(50) / 1e6,
           f"std_{name}_ms": hist.std / 1e6, f"min_{name}_ms": hist.min / 1e6, f"max_{name}_ms": hist.max / 1e6}
    for q in percentiles:
        out[f"p{percentile_word(q)}_{name}_ms"] = hist.percentile(q) / 1e6
    return out


def peak_output_and_concurrency(start_ns: np.ndarray, end_ns: np.ndarray, token_ns: np.ndarray,
                                token_n: np.ndarray) -> tuple[float, int]:
    """vllm bench serve's `max_output_tokens_per_s` and `max_concurrent_requests`.

    As vLLM 0.32 `calculate_metrics` (vllm/benchmarks/serve.py) computes them over the
    successful requests: whole seconds counted from the first one's start; each output
    chunk adds one to the second it arrives in; each request adds one to every second from
    the one it starts in to the one it ends in, both included. The peaks are the largest
    counts. (Here with integer nanoseconds, where vLLM truncates float seconds.)
    """
    if start_ns.size == 0:
        return 0.0, 0
    origin = int(start_ns.min())
    seconds = -(-(int(end_ns.max()) - origin) // NS_PER_S) + 1   # vLLM: ceil(span) + 1 buckets
    bucket = (token_ns - origin) // NS_PER_S
    inside = (bucket >= 0) & (bucket < seconds)
    tokens = np.bincount(bucket[inside], weights=token_n[inside], minlength=seconds)
    first = (start_ns - origin) // NS_PER_S
    last = (end_ns - origin) // NS_PER_S
    steps = np.bincount(first, minlength=seconds + 1) - np.bincount(last + 1, minlength=seconds + 1)
    return float(tokens.max()), int(np.cumsum(steps).max())


def summarize(table: RequestTable, itl: LogHistogram, slo: SloConfig, warmup: int = 0,
              percentiles=DEFAULT_PERCENTILES, deliveries: tuple[np.ndarray, np.ndarray] | None = None) -> dict:
    """The run's figures; `deliveries` ((time ns, count) of output chunks to measured requests,
    Collector.deliveries) gives the peak output rate, None leaves it out."""
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
        **_stats("ttft", ttft, percentiles),
        **_stats("tpot", tpot, percentiles),
        **_hist_stats("itl", itl, percentiles),
        **_stats("e2e", e2e, percentiles),
        "good_requests": int(good.sum()),
        "request_goodput_req_s": rate(int(good.sum())),
        "goodput_output_throughput_tok_s": rate(good_output),
        "prefix_cache_hit_rate": cached / input_tokens if input_tokens else None,
        "host_cache_hit_rate": host_cached / input_tokens if input_tokens else None,
        "preempted_requests": int((column("preemptions")[done] > 0).sum()),
        "percentiles": [float(q) for q in percentiles],
    }
    if deliveries is not None:
        peak_tokens, peak_requests = peak_output_and_concurrency(arrival_all[done], finish_all[done], *deliveries)
        summary["max_output_tokens_per_s"] = peak_tokens
        summary["max_concurrent_requests"] = peak_requests
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in summary.items()}
