"""Clients: when each request reaches the frontend.

- open loop: at its trace arrival time (times `time_scale`);
- poisson: the trace's requests in order, re-timed as a seeded Poisson process,
  the first at time 0;
- closed loop: `concurrency` users each send a request at time 0, and each sends
  its next one the moment its previous one finishes (or is rejected).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from servesim.config import ClientConfig, ClosedLoopClient, OpenLoopClient, PoissonClient
from servesim.errors import ServesimError
from servesim.seeds import rng_for
from servesim.workload.trace import NS_PER_S, TraceRequest


class Client:
    """Yields (arrival time, request) pairs; told when a request completes."""

    def initial(self) -> Iterator[tuple[int, TraceRequest]]:
        raise NotImplementedError

    def on_complete(self, time_ns: int) -> TraceRequest | None:
        """The request this completion releases, sent at `time_ns` (closed loop only)."""
        return None


class ScheduledClient(Client):
    """Open loop and Poisson: every arrival time is known up front."""

    def __init__(self, arrivals: list[tuple[int, TraceRequest]]):
        # Stable: requests with equal times keep trace order.
        self._arrivals = sorted(arrivals, key=lambda pair: pair[0])

    def initial(self) -> Iterator[tuple[int, TraceRequest]]:
        return iter(self._arrivals)


class ClosedLoop(Client):
    def __init__(self, requests: list[TraceRequest], concurrency: int):
        self._pending = deque(requests)
        self._concurrency = concurrency

    def initial(self) -> Iterator[tuple[int, TraceRequest]]:
        # Taken now: a user whose first request is rejected at once sends its next one
        # before the other users' first requests have all been handed out.
        first = [self._pending.popleft() for _ in range(min(self._concurrency, len(self._pending)))]
        return iter([(0, r) for r in first])

    def on_complete(self, time_ns: int) -> TraceRequest | None:
        return self._pending.popleft() if self._pending else None


def make_client(cfg: ClientConfig, requests: list[TraceRequest], root_seed: int) -> Client:
    if isinstance(cfg, OpenLoopClient):
        if any(r.arrival_ns is None for r in requests):
            if all(r.arrival_ns is None for r in requests):
                # Synthetic workloads and length-only traces: everything at once.
                return ScheduledClient([(0, r) for r in requests])
            raise ServesimError("the trace gives arrival times for some requests but not all")
        scale = cfg.time_scale
        if scale == 1.0:
            return ScheduledClient([(r.arrival_ns, r) for r in requests])
        return ScheduledClient([(round(r.arrival_ns * scale), r) for r in requests])
    if isinstance(cfg, PoissonClient):
        rng = rng_for(root_seed, "poisson")
        gaps = rng.exponential(1.0 / cfg.rate, size=len(requests))
        gaps[0] = 0.0
        times = (gaps.cumsum() * NS_PER_S).round().astype("int64")
        return ScheduledClient([(int(t), r) for t, r in zip(times, requests)])
    if isinstance(cfg, ClosedLoopClient):
        return ClosedLoop(requests, cfg.concurrency)
    raise AssertionError(cfg)
