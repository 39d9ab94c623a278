"""Clients: when each request reaches the frontend.

- open loop: at its trace arrival time (times `time_scale`); requests without
  arrival times (synthetic ones) all arrive at time 0;
- poisson: the requests in order, re-timed as a seeded Poisson process, the
  first at time 0;
- closed loop: `concurrency` users each send a request at time 0, and each sends
  its next one the moment its previous one finishes (or is rejected);
- bench: `vllm bench serve`'s traffic (workload/bench_client.py): gamma-distributed
  gaps, optionally ramped up, behind a semaphore of `max_concurrency` requests.

Clients pull requests from an iterator as they need them, so a synthetic
workload of any length is never held in memory.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator

from servesim.config import BenchClient, ClientConfig, ClosedLoopClient, OpenLoopClient, PoissonClient
from servesim.errors import ServesimError
from servesim.seeds import rng_for
from servesim.workload.trace import NS_PER_S, TraceRequest

POISSON_BLOCK = 65536


class Client:
    """Yields (arrival time, request) pairs in time order; told when a request completes."""

    def initial(self) -> Iterator[tuple[int, TraceRequest]]:
        raise NotImplementedError

    def on_complete(self, time_ns: int) -> TraceRequest | None:
        """The request this completion releases, sent at `time_ns` (closed loop only)."""
        return None

    # A client may also define `admit(time_ns, request) -> bool`: whether a scheduled arrival
    # is sent now (True) or held until a completion releases it (cluster/simulation.py).
    # And `follow_ups(request_id, outputs, rejected, time_ns)`: the (time, request) pairs that
    # request's completion at `time_ns` sends later, each through `admit` (workload/sessions.py).


class ScheduledClient(Client):
    """Every arrival time follows from the workload alone (open loop, Poisson)."""

    def __init__(self, arrivals: Iterator[tuple[int, TraceRequest]]):
        self._arrivals = arrivals

    def initial(self) -> Iterator[tuple[int, TraceRequest]]:
        return self._arrivals


class ClosedLoop(Client):
    def __init__(self, requests: Iterable[TraceRequest], concurrency: int):
        self._pending = iter(requests)
        self._concurrency = concurrency

    def initial(self) -> Iterator[tuple[int, TraceRequest]]:
        # Taken now: a user whose first request is rejected at once sends its next one
        # before the other users' first requests have all been handed out.
        first = [r for _, r in zip(range(self._concurrency), self._pending)]
        return iter([(0, r) for r in first])

    def on_complete(self, time_ns: int) -> TraceRequest | None:
        return next(self._pending, None)


class GatedSchedule(Client):
    """Scheduled arrivals behind a semaphore of `limit` requests in flight.

    vllm bench serve (vLLM 0.32 benchmarks/serve.py, `benchmark`) starts every request at its
    scheduled time, but each waits for the semaphore before it is sent; asyncio wakes waiters
    first come, first served, so a finishing request hands its slot to the longest waiter.
    """

    def __init__(self, arrivals: Iterator[tuple[int, TraceRequest]], limit: int):
        self._arrivals = arrivals
        self._free = limit
        self._waiting: deque[TraceRequest] = deque()

    def initial(self) -> Iterator[tuple[int, TraceRequest]]:
        return self._arrivals

    def admit(self, time_ns: int, request: TraceRequest) -> bool:
        if self._free:
            self._free -= 1
            return True
        self._waiting.append(request)
        return False

    def on_complete(self, time_ns: int) -> TraceRequest | None:
        if self._waiting:
            return self._waiting.popleft()   # the slot passes straight on
        self._free += 1
        return None


def _open_loop(requests: list[TraceRequest], scale: float) -> Iterator[tuple[int, TraceRequest]]:
    timed = [r.arrival_ns is not None for r in requests]
    if not any(timed):
        return ((0, r) for r in requests)
    if not all(timed):
        raise ServesimError("the trace gives arrival times for some requests but not all")
    if scale == 1.0:
        pairs = [(r.arrival_ns, r) for r in requests]
    else:
        pairs = [(round(r.arrival_ns * scale), r) for r in requests]
    pairs.sort(key=lambda pair: pair[0])  # stable: equal times keep trace order
    return iter(pairs)


def _poisson(requests: Iterable[TraceRequest], rate: float, root_seed: int) -> Iterator[tuple[int, TraceRequest]]:
    rng = rng_for(root_seed, "poisson")
    clock = 0.0
    first = True
    gaps: list[float] = []
    for request in requests:
        if not gaps:
            gaps = rng.exponential(1.0 / rate, size=POISSON_BLOCK).tolist()
            gaps.reverse()
        gap = gaps.pop()
        if first:
            first = False
        else:
            clock += gap
        yield round(clock * NS_PER_S), request


def make_client(cfg: ClientConfig, requests: Iterable[TraceRequest], root_seed: int,
                total: int | None = None) -> Client:
    """The client for `requests`; `total` is how many there are when they come lazily."""
    if isinstance(cfg, OpenLoopClient):
        if not isinstance(requests, list):
            return ScheduledClient((0, r) for r in requests)  # synthetic: no arrival times
        return ScheduledClient(_open_loop(requests, cfg.time_scale))
    if isinstance(cfg, PoissonClient):
        return ScheduledClient(_poisson(requests, cfg.rate, root_seed))
    if isinstance(cfg, ClosedLoopClient):
        return ClosedLoop(requests, cfg.concurrency)
    if isinstance(cfg, BenchClient):
        return _bench(cfg, requests, root_seed, total)
    raise AssertionError(cfg)


def _bench(cfg: BenchClient, requests: Iterable[TraceRequest], root_seed: int, total: int | None) -> Client:
    from servesim.workload.bench_client import bench_arrivals, is_closed_loop

    if is_closed_loop(cfg):
        # request_rate inf: every request is due at 0 and waits for a slot, which is a closed
        # loop of max_concurrency users; run it as one, so both spellings give the same run.
        return ClosedLoop(requests, cfg.max_concurrency)
    if total is None:   # a trace: already a list, but a caller may hand any iterable
        if not isinstance(requests, list):
            requests = list(requests)
        total = len(requests)
    arrivals = bench_arrivals(cfg, requests, total, root_seed)
    if cfg.max_concurrency is None:
        return ScheduledClient(arrivals)
    return GatedSchedule(arrivals, cfg.max_concurrency)
