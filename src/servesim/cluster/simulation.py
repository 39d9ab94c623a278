"""The discrete-event loop: client → frontend and router → worker passes → records.

Events are kept in a heap ordered by (time, kind, sequence number). At one
instant the kinds run in this order, and events of one kind in the order they
were created:

1. pass ends: outputs are processed, finished requests are recorded, and a
   closed-loop client sends its next request (stamped at this instant);
2. frontend arrivals: tokenization, then routing to a worker (or rejection),
   and KV transfers completing (disaggregated serving);
3. engine arrivals: the request enters the worker's intake;
4. scheduler calls: a worker reads its intake and commits passes.

So a scheduler call at time t sees every request that reached its engine by t,
and the worker decides from the arrival times which of them it may read
(see engine/worker.py).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterator

from servesim.cluster.fleet import RequestFactory, Role
from servesim.cluster.router import Router
from servesim.engine.passes import PassResult
from servesim.engine.request import Request, Status
from servesim.errors import ServesimError
from servesim.engine.worker import Worker
from servesim.metrics.collector import Collector
from servesim.workload.clients import Client, ScheduledClient
from servesim.workload.trace import TraceRequest

PASS_END, FRONTEND_ARRIVAL, ENGINE_ARRIVAL, SCHEDULER_CALL = 0, 1, 2, 3

ProgressFn = Callable[[int, int], None]  # (simulated ns, requests done)


class Simulation:
    def __init__(self, client: Client, tokenization_ns: int, collector: Collector) -> None:
        self._heap: list = []
        self._seq = 0
        self.client = client
        self.tokenization_ns = tokenization_ns
        self.collector = collector
        self.roles: dict[str, Role] = {}
        self.routers: dict[str, Router] = {}
        self.factories: dict[str, RequestFactory] = {}
        self.disaggregation = None   # cluster/disaggregation.py, when prefill and decode pools are split
        self.now = 0
        self.requests_done = 0
        self._feed: Iterator[tuple[int, TraceRequest]] | None = None
        # Arrivals come only from the client's schedule (not released by completions): a
        # worker's future then depends on other workers only through new arrivals.
        self.scheduled_arrivals = isinstance(client, ScheduledClient)
        self._admit = getattr(client, "admit", None)   # a semaphore in front of the frontend, if any
        self._feed_time: int | None = None   # the pending feed arrival, if any

    # ------------------------------------------------------------------ scheduling events

    def push(self, t: int, kind: int, handler: Callable, arg: object) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, kind, self._seq, handler, arg))

    def next_event_time(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def horizon(self, worker: Worker) -> int | None:
        """The earliest time something outside `worker` can change what it does.

        With a scheduled client, aggregated workers are independent between arrivals: another
        worker's pass ends cannot reach them (a router decides only at an arrival). Under
        disaggregation, KV transfers and prefill pass ends reach across roles too. With a
        closed-loop client any completion releases an arrival: any pending event might.
        """
        if not self.scheduled_arrivals:
            return self.next_event_time()
        times = [self._feed_time, worker.next_engine_arrival()]
        if self.disaggregation is not None:
            # A finished transfer frees a prefill worker's blocks and queues work on a decode
            # worker; a prefill pass end can reserve a decode worker's blocks for a handoff.
            times.append(self.disaggregation.next_transfer_done())
            if worker.role == "decode":
                # A prefill worker hands over only at the end of a pass that samples.
                now = self.now
                times.extend(w.next_output_bound(now) for w in self.roles["prefill"].workers)
                # A decode pass end with handoffs queued for it starts their transfers; each
                # frees a prefill worker's blocks, whose next prefill may come to this worker.
                pending = self.disaggregation.pending
                times.extend(w.executing.end_ns for w in self.roles["decode"].workers
                             if w is not worker and w.executing is not None and pending.get(w.name))
        times = [t for t in times if t is not None]
        return min(times) if times else None

    def push_pass_end(self, t: int, worker: Worker, done: PassResult) -> None:
        self.push(t, PASS_END, worker.on_pass_end, done)

    def push_scheduler_call(self, t: int, worker: Worker) -> None:
        self.push(t, SCHEDULER_CALL, worker.on_scheduler_call, None)

    def push_engine_arrival(self, t: int, worker: Worker, request: Request) -> None:
        worker.expect_arrival(t)
        self.push(t, ENGINE_ARRIVAL, worker.on_engine_arrival, request)

    # ------------------------------------------------------------------ frontend

    def _on_feed_arrival(self, now: int, trace_request: TraceRequest) -> None:
        self._push_next_feed()
        if self._admit is None or self._admit(now, trace_request):
            self._on_frontend_arrival(now, trace_request)

    def _push_next_feed(self) -> None:
        nxt = next(self._feed, None)
        self._feed_time = None if nxt is None else nxt[0]
        if nxt is not None:
            self.push(nxt[0], FRONTEND_ARRIVAL, self._on_feed_arrival, nxt[1])

    def _on_frontend_arrival(self, now: int, trace_request: TraceRequest) -> None:
        engine_arrival = now + self.tokenization_ns
        if self.disaggregation is not None:
            self.disaggregation.on_arrival(now, engine_arrival, trace_request)
            return
        self.route(now, engine_arrival, trace_request, "aggregated")

    def route(self, now: int, engine_arrival: int, trace_request: TraceRequest, role_name: str,
              max_output: int | None = None) -> Request:
        """Pick a worker of `role_name` for the request and send it there (or reject it)."""
        role = self.roles[role_name]
        factory = self.factories[role_name]
        router = self.routers[role_name]
        keys = factory.keys(trace_request) if factory.sched.prefix_caching else None
        index = router.choose(trace_request.input_length, trace_request.output_length, lambda worker: keys)
        worker = role.workers[index]
        request = factory.make(trace_request, now, engine_arrival, max_output, keys)
        request.worker = worker.name
        if factory.rejects(trace_request):
            request.status = Status.REJECTED
            request.finish_ns = engine_arrival
            self.complete(request, engine_arrival)
            return request
        tokens = trace_request.input_length + request.max_tokens
        router.sent(index, tokens)
        request.route = (router, index, tokens)
        self.push_engine_arrival(engine_arrival, worker, request)
        return request

    # ------------------------------------------------------------------ outputs

    def push_early_record(self, t: int, worker: Worker, record: PassResult) -> None:
        """The passes of a fast-forwarded run up to a finish inside it, reported at that pass end."""
        self.push(t, PASS_END, self._on_early_record, (worker, record))

    def _on_early_record(self, _: int, arg: tuple[Worker, PassResult]) -> None:
        self.on_pass_done(*arg)

    def on_pass_done(self, worker: Worker, done: PassResult) -> None:
        self.collector.on_pass(worker, done)
        for request in done.finished:
            if request.route is not None:
                router, index, tokens = request.route
                router.returned(index, tokens)
            if self.disaggregation is not None and self.disaggregation.on_finished(worker, request, done.end_ns):
                continue
            self.complete(request, done.end_ns)
        if self.disaggregation is not None:
            self.disaggregation.after_pass(worker, done.end_ns)

    def complete(self, request: Request, now: int) -> None:
        self.requests_done += 1
        self.collector.on_request_done(request)
        follow = self.client.on_complete(now)
        if follow is not None:
            self.push(now, FRONTEND_ARRIVAL, self._on_frontend_arrival, follow)

    # ------------------------------------------------------------------ loop

    def run(self, progress: ProgressFn | None = None, progress_every_s: float = 0.2) -> None:
        # A finish is quiet outside its engine when no client waits on it and no prefill
        # worker waits for the blocks it frees: runs of decode passes may then go past it.
        quiet = self.scheduled_arrivals and self.disaggregation is None
        for role in self.roles.values():
            for worker in role.workers:
                worker.scheduler.finishes_are_quiet = quiet
                # Under disaggregation KV transfers and block reservations reach a decode
                # worker between its passes too, and a run in flight cannot take those in.
                worker.late_follow = (worker.async_scheduling and worker.scheduler.commits_follow_late
                                      and self.disaggregation is None)
        self._feed = self.client.initial()
        self._push_next_feed()
        heap = self._heap
        pop = heapq.heappop
        next_report = time.perf_counter() + progress_every_s if progress else None
        events = 0
        while heap:
            t, _, _, handler, arg = pop(heap)
            self.now = t
            handler(t, arg)
            events += 1
            if next_report is not None and events & 1023 == 0:
                wall = time.perf_counter()
                if wall >= next_report:
                    progress(t, self.requests_done)
                    next_report = wall + progress_every_s
        if progress:
            progress(self.now, self.requests_done)
        self._check_drained()

    def _check_drained(self) -> None:
        """Nothing left to happen while a worker still holds requests: the engine can never serve them."""
        for role in self.roles.values():
            for worker in role.workers:
                scheduler = worker.scheduler
                if scheduler.has_unfinished() or worker.intake:
                    stuck = next(iter([*worker.intake, *scheduler.waiting, *scheduler.transferred]), None)
                    what = f"request {stuck.request_id}" if stuck is not None else "a request"
                    raise ServesimError(
                        f"{worker.name} can never schedule {what}: nothing else is left to happen "
                        f"and its scheduler will not admit it (its KV cache or limits are too small for it)"
                    )
