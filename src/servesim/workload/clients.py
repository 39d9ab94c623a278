"""Clients: when each request reaches the frontend.

- open loop: at its trace arrival time (times `time_scale`); requests without
  arrival times (synthetic ones) all arrive at time 0;
- poisson: the requests in order, re-timed as a seeded Poisson process, the
  first at time 0;
- closed loop: `concurrency` users each send a request at time 0, and each sends
  its next one the moment its previous one finishes (or is rejected).

Clients pull requests from an iterator as they need them, so a synthetic
workload of any length is never held in memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from servesim.config import ClientConfig, ClosedLoopClient, OpenLoopClient, PoissonClient
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


def make_client(cfg: ClientConfig, requests: Iterable[TraceRequest], root_seed: int) -> Client:
    if isinstance(cfg, OpenLoopClient):
        if not isinstance(requests, list):
            return ScheduledClient((0, r) for r in requests)  # synthetic: no arrival times
        return ScheduledClient(_open_loop(requests, cfg.time_scale))
    if isinstance(cfg, PoissonClient):
        return ScheduledClient(_poisson(requests, cfg.rate, root_seed))
    if isinstance(cfg, ClosedLoopClient):
        return ClosedLoop(requests, cfg.concurrency)
    raise AssertionError(cfg)
