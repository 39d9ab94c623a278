"""`vllm bench serve`'s arrival times, after vLLM 0.32 vllm/benchmarks/serve.py.

`get_request` there gives request i (0-based, of N) a rate r_i: the fixed
`request_rate`, or with a ramp-up (`_get_current_request_rate`) progress
p = i / max(N − 1, 1) and r_i = start + (end − start)·p (linear) or
start·(end / start)^p (exponential). Its gap before it is 0 when r_i is inf,
1/r_i when burstiness is inf, and otherwise a gamma draw with shape = burstiness
and scale = 1 / (r_i · burstiness) (mean 1/r_i; burstiness 1 is a Poisson
process). Request i is sent at the sum of gaps 0 … i (so the first one waits
its own gap too). Without a ramp-up the times are then scaled so the last one
lands exactly at N / request_rate, as vLLM does to steady throughput across
seeds. `benchmark` then puts a semaphore of `max_concurrency` in front of the
server (workload/clients.py, GatedSchedule).

Draws come from the "bench" stream of the root seed (servesim/seeds.py), not
numpy's global state as in vLLM, so runs repeat exactly but do not reproduce
vLLM's own draws. The schedule is generated twice when it must be scaled (once
for the last time, once to send), so a long synthetic workload is never held.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

from servesim.config import BenchClient
from servesim.errors import ServesimError
from servesim.limits import MAX_TIME_NS
from servesim.seeds import rng_for
from servesim.workload.trace import NS_PER_S, TraceRequest

GAMMA_BLOCK = 65536
INF = float("inf")


def _number(value: float | str) -> float:
    return INF if value == "inf" else float(value)


def is_closed_loop(cfg: BenchClient) -> bool:
    """Every request due at once behind a semaphore: a closed loop of max_concurrency users."""
    return cfg.request_rate == "inf" and cfg.ramp_up_strategy is None and cfg.max_concurrency is not None


def request_rate_at(cfg: BenchClient, index: int, total: int) -> float:
    """The rate (requests/s) request `index` of `total` is sent at (vLLM's _get_current_request_rate)."""
    if cfg.ramp_up_strategy is None:
        return _number(cfg.request_rate)
    start, end = cfg.ramp_up_start_rps, cfg.ramp_up_end_rps
    progress = index / max(total - 1, 1)
    if cfg.ramp_up_strategy == "linear":
        return start + (end - start) * progress
    return start * (end / start) ** progress


def _gaps(cfg: BenchClient, total: int, root_seed: int) -> Iterator[float]:
    """Seconds before each request, after the one before it (the first: after the start)."""
    burstiness = _number(cfg.burstiness)
    rng = None
    draws: list[float] = []
    for index in range(total):
        rate = request_rate_at(cfg, index, total)
        if rate == INF:
            yield 0.0
        elif burstiness == INF:
            yield 1.0 / rate
        else:
            if not draws:
                rng = rng or rng_for(root_seed, "bench")
                # gamma(shape, scale) is scale × standard_gamma(shape); one block of draws at a time.
                draws = rng.standard_gamma(burstiness, size=GAMMA_BLOCK).tolist()
                draws.reverse()
            yield draws.pop() * (1.0 / (rate * burstiness))


def _offsets(cfg: BenchClient, total: int, root_seed: int) -> Iterator[float]:
    clock = 0.0
    for gap in _gaps(cfg, total, root_seed):
        clock += gap
        yield clock


def _scale(cfg: BenchClient, total: int, root_seed: int) -> float:
    """vLLM's normalize_factor: the last request lands at N / request_rate (1 with a ramp-up)."""
    if cfg.ramp_up_strategy is not None or cfg.request_rate == "inf":
        return 1.0
    last = 0.0
    for last in _offsets(cfg, total, root_seed):
        pass
    if not math.isfinite(last):
        raise ServesimError(f"workload.client.burstiness {cfg.burstiness} is too small: the gaps between "
                            "requests overflow")
    return (total / cfg.request_rate) / last if last != 0 else 1.0


def bench_arrivals(cfg: BenchClient, requests: Iterable[TraceRequest], total: int,
                   root_seed: int) -> Iterator[tuple[int, TraceRequest]]:
    """(send time in ns, request) in order: when each request reaches the semaphore, if any."""
    slowest = min(request_rate_at(cfg, 0, total), request_rate_at(cfg, total - 1, total)) if total else INF
    if slowest != INF and total / slowest * NS_PER_S >= MAX_TIME_NS:
        raise ServesimError(f"workload.client: {total} requests at {slowest:g} requests/s would arrive "
                            "past what integer-nanosecond time holds; raise the request rate")
    factor = _scale(cfg, total, root_seed)
    return _timed(cfg, requests, total, root_seed, factor)


def _timed(cfg: BenchClient, requests: Iterable[TraceRequest], total: int, root_seed: int,
           factor: float) -> Iterator[tuple[int, TraceRequest]]:
    for request, offset in zip(requests, _offsets(cfg, total, root_seed)):
        yield round(offset * factor * NS_PER_S), request
