"""The discrete-event loop: client → frontend and router → worker passes → records.

Events are kept in a heap ordered by (time, kind, sequence number). At one
instant the kinds run in this order, and events of one kind in the order they
were created:

1. pass ends: outputs are processed, finished requests are recorded, and a
   closed-loop client sends its next request (stamped at this instant);
2. frontend arrivals: tokenization, then routing to a worker (or rejection),
   KV transfers completing (disaggregated serving), and an autoscaler's syncs and
   replicas coming up (cluster/autoscaler.py);
3. engine arrivals: the request enters the worker's intake;
4. scheduler calls: a worker reads its intake and commits passes.

So a scheduler call at time t sees every request that reached its engine by t,
and the worker decides from the arrival times which of them it may read
(see engine/worker.py). Submitted requests (`submit`) and aborts (`abort`) are
frontend events (item 2): at one instant they come after the pass ends and, with the
client's arrivals, in the order they were made; an abort reaches its engine at the
next scheduler call with no pass in flight (engine/worker.py's apply_aborts).

The loop can be stepped: `run_until(t)` handles every event before t (the clock then
reads t, and `submit`/`abort` take times from t on), `snapshot()` says what each worker
holds, `run()` goes to the end. The batch runner (run.py) calls `run()` only; a run of
decode passes is never fast-forwarded past the time `run_until` stops at, since an
input may come then (fast-forwarding is exact, so where runs stop changes no result).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from servesim import limits
from servesim.cluster.disaggregation import Disaggregation
from servesim.cluster.fleet import RequestFactory, Role
from servesim.cluster.router import Router
from servesim.config.run_spec import TransferSpec
from servesim.engine.passes import PassResult
from servesim.engine.request import REJECTED, Request
from servesim.engine.request_path import RequestPath
from servesim.errors import ServesimError
from servesim.engine.worker import Worker
from servesim.metrics.collector import Collector
from servesim.workload.clients import Client, ScheduledClient
from servesim.workload.trace import TraceRequest

PASS_END, FRONTEND_ARRIVAL, ENGINE_ARRIVAL, SCHEDULER_CALL = 0, 1, 2, 3

ProgressFn = Callable[[int, int], None]  # (simulated ns, requests done)
TokenFn = Callable[[int, int, int], None]  # (request id, delivery time ns, output tokens so far)


@dataclass(frozen=True)
class Cluster:
    """The fleet a simulation runs (cluster/build.py makes it): each role's workers, request
    factory and router, and the KV transfer settings when prefill and decode are split."""

    roles: dict[str, Role]
    factories: dict[str, RequestFactory]
    routers: dict[str, Router]
    transfer: TransferSpec | None = None   # disaggregated serving
    # Roles whose replicas scale (cluster/autoscaler.py): (autoscaler, grow) by role, `grow()`
    # adding a fresh worker to the role and its router.
    autoscalers: dict | None = None


@dataclass(frozen=True)
class WorkerSnapshot:
    name: str
    role: str
    running: int          # requests in the running batch
    waiting: int          # queued in the scheduler, or arrived and not yet read
    kv_blocks_used: int   # of the worker's usable KV blocks (the null block aside)
    busy: bool            # a pass is in flight


class Simulation:
    """The event loop over one cluster; an `EventSink` to each of its workers."""

    def __init__(self, client: Client, request_path: RequestPath, collector: Collector, cluster: Cluster,
                 on_token: TokenFn | None = None) -> None:
        self._heap: list = []
        self._seq = 0
        self.client = client
        self.request_path = request_path   # the API server's time before and after the engine
        self.collector = collector
        self.roles = cluster.roles
        self.routers = cluster.routers
        self.factories = cluster.factories
        # Arrivals come only from the client's schedule (not released by completions): a
        # worker's future then depends on other workers only through new arrivals, and no
        # horizon reads the pending events (engine/events.py's EventSink; Worker.attach reads it).
        self.scheduled_arrivals = isinstance(client, ScheduledClient)
        self.disaggregation: Disaggregation | None = None
        if cluster.transfer is not None:
            self.disaggregation = Disaggregation(self, cluster, cluster.transfer)
        for role in self.roles.values():
            for worker in role.workers:
                worker.attach(self)
        self.on_token = on_token   # (request id, time ns, outputs so far) at each delivery
        self.aborted: list[Request] = []   # dropped by abort(), in the order they were
        self.now = 0
        self.requests_done = 0
        self._feed: Iterator[tuple[int, TraceRequest]] | None = None
        self._admit = getattr(client, "admit", None)   # a semaphore in front of the frontend, if any
        # Requests a completion sends later (a session's next turn after its think time), if any.
        self._follow_ups = getattr(client, "follow_ups", None)
        self._feed_time: int | None = None   # the pending feed arrival, if any
        self._started = False
        self._inputs_due: list[int] = []     # times of the submits and aborts not yet handled (a heap)
        self._until: int | None = None       # run_until's bound, while stepping
        self.autoscalers = cluster.autoscalers or {}
        if self.disaggregation is not None:
            for scaler, _ in self.autoscalers.values():
                scaler.owes_handoff = self.disaggregation.owes
        self._completion_observers = [s for s, _ in self.autoscalers.values() if hasattr(s, "on_complete")]
        # kv_aware routers whose index hears the workers' KV events at each pass end.
        self._event_routers = [r for r in self.routers.values() if r.hears_kv_events]
        self._next_sync: int | None = None   # the autoscalers' next sync, while armed

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
        closed-loop client any completion releases an arrival: any pending event might. While
        stepping, an input may come at run_until's bound.
        """
        if not self.scheduled_arrivals:
            upcoming = self.next_event_time()
            if self._until is not None and (upcoming is None or self._until < upcoming):
                return self._until
            return upcoming
        # The earliest of these, None ones left out; asked at every run a worker tries.
        bound = self._feed_time
        for t in (worker.next_engine_arrival(), self._until, self._next_sync,
                  self._inputs_due[0] if self._inputs_due else None):
            if t is not None and (bound is None or t < bound):
                bound = t
        if self.disaggregation is not None:
            return self.disaggregation.horizon(worker, self.now, bound)
        return bound

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
        if self.autoscalers:
            self._arm_paused(now)
        engine_arrival = now + self.request_path.inbound_ns(trace_request.input_length)
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
        index = router.choose(trace_request.input_length, trace_request.output_length, lambda worker: keys,
                              trace_request, now)
        worker = role.workers[index]
        request = factory.make(trace_request, now, engine_arrival, max_output, keys)
        request.worker = worker.name
        if factory.rejects(trace_request):
            request.status = REJECTED
            request.finish_ns = engine_arrival
            self.complete(request, engine_arrival)
            return request
        tokens = trace_request.input_length + request.max_tokens
        router.sent(index, tokens, request)
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
        for router in self._event_routers:
            router.selector.on_pass_done(worker, done)
        if self.on_token is not None:
            # The reference engine runs under a callback (cluster/engine_choice.py): every
            # pass lists each request that got tokens in it.
            for request in done.delivered:
                self.on_token(request.request_id, done.end_ns, request.num_output)
        for request in done.finished:
            if request.route is not None:
                router, index, tokens = request.route
                router.returned(index, tokens, request)
            if self.disaggregation is not None and self.disaggregation.on_finished(worker, request, done.end_ns):
                continue
            self.complete(request, done.end_ns)
        if self.disaggregation is not None:
            self.disaggregation.after_pass(worker, done.end_ns)
        if self.autoscalers:
            self.after_scaled_change(worker, done.end_ns)

    def complete(self, request: Request, now: int) -> None:
        outbound = self.request_path.outbound_ns
        if outbound and request.first_token_ns is not None:
            # The client reads each token the output path's time after the engine sends it, the
            # last one too: a closed-loop user sends its next request only then.
            request.outbound_ns = outbound
            request.first_token_ns += outbound
            request.finish_ns += outbound
            now += outbound
        self.requests_done += 1
        self.collector.on_request_done(request)
        for observer in self._completion_observers:   # the SLA planner reads the frontend
            observer.on_complete(request, now)
        follow = self.client.on_complete(now)
        if follow is not None:
            self.push(now, FRONTEND_ARRIVAL, self._on_frontend_arrival, follow)
        if self._follow_ups is not None:
            rejected = request.status == REJECTED
            for at, later in self._follow_ups(request.request_id, request.num_output, rejected, now):
                self.push(at, FRONTEND_ARRIVAL, self._on_follow_up, later)

    def _on_follow_up(self, now: int, trace_request: TraceRequest) -> None:
        if self._admit is None or self._admit(now, trace_request):
            self._on_frontend_arrival(now, trace_request)

    def on_aborted(self, worker: Worker, request: Request, now: int) -> None:
        if request.route is not None:
            router, index, tokens = request.route
            router.returned(index, tokens, request)
        request.finish_ns = now
        self.aborted.append(request)
        if self.autoscalers:
            self.after_scaled_change(worker, now)

    # ------------------------------------------------------------------ stepping

    def submit(self, request: TraceRequest, at: int) -> None:
        """`request` reaches the frontend at `at` (ns, not before the clock)."""
        self._check_input_time("submit", at)
        heapq.heappush(self._inputs_due, at)
        self.push(at, FRONTEND_ARRIVAL, self._on_submitted, request)

    def _on_submitted(self, now: int, request: TraceRequest) -> None:
        heapq.heappop(self._inputs_due)
        self._on_frontend_arrival(now, request)

    def abort(self, request_id: int, at: int) -> None:
        """Abort request `request_id` at `at`: its engine drops it and frees its blocks (it
        leaves no row in the records; `aborted` lists it). One already finished, or not
        routed to an engine by then, is left alone."""
        self._check_input_time("abort", at)
        if self.disaggregation is not None:
            raise ServesimError("abort: aborting requests under prefill/decode disaggregation is not modelled")
        heapq.heappush(self._inputs_due, at)
        self.push(at, FRONTEND_ARRIVAL, self._on_abort, request_id)

    def _on_abort(self, now: int, request_id: int) -> None:
        heapq.heappop(self._inputs_due)
        found = self._find(request_id)
        if found is not None:
            worker, request = found
            worker.abort(request, now)

    def _find(self, request_id: int) -> tuple[Worker, Request] | None:
        """The worker that holds the request, or that it is on its way to (rare: a scan)."""
        for role in self.roles.values():
            for worker in role.workers:
                for request in worker.requests():
                    if request.request_id == request_id:
                        return worker, request
        for _, kind, _, handler, arg in self._heap:
            if kind == ENGINE_ARRIVAL and arg.request_id == request_id:
                return handler.__self__, arg
        return None

    def _check_input_time(self, what: str, at: int) -> None:
        clock = self.now if self._until is None else max(self.now, self._until)
        if type(at) is not int or at < clock:
            raise ServesimError(f"{what}: at must be an integer time (ns) from the clock's {clock} on, got {at!r}")

    def run_until(self, t: int) -> None:
        """Handle every event before `t`; the clock then reads `t`."""
        if type(t) is not int or t < self.now:
            raise ServesimError(f"run_until: t must be an integer time (ns) from {self.now} on, got {t!r}")
        self._start()
        self._until = t
        heap = self._heap
        pop = heapq.heappop
        with limits.clock_overflow_is_an_error():
            while heap and heap[0][0] < t:
                now, _, _, handler, arg = pop(heap)
                self.now = now
                handler(now, arg)
        self.now = t

    def snapshot(self) -> list[WorkerSnapshot]:
        """Each worker's state now, in fleet order."""
        return [WorkerSnapshot(worker.name, worker.role, worker.scheduler.num_running(),
                               len(worker.scheduler.waiting) + len(worker.intake),
                               worker.scheduler.kv.num_used, worker.executing is not None)
                for role in self.roles.values() for worker in role.workers]

    # ------------------------------------------------------------------ loop

    def _start(self) -> None:
        if not self._started:
            self._started = True
            self._feed = self.client.initial()
            self._push_next_feed()
            if self.autoscalers:
                for scaler, _ in self.autoscalers.values():
                    self._arm(scaler, scaler.period_ns)

    # ------------------------------------------------------------------ autoscaling

    def _arm(self, scaler, at: int) -> None:
        scaler.next_sync = at
        self._next_sync = min(s.next_sync for s, _ in self.autoscalers.values() if s.next_sync is not None)
        self.push(at, FRONTEND_ARRIVAL, self._on_autoscale_sync, scaler)

    def _arm_paused(self, now: int) -> None:
        """A role whose syncs paused (nothing was left to happen) syncs again at the first
        boundary of its period after this arrival."""
        for scaler, _ in self.autoscalers.values():
            if scaler.next_sync is None:
                self._arm(scaler, now - now % scaler.period_ns + scaler.period_ns)

    def _on_autoscale_sync(self, now: int, scaler) -> None:
        """A role's sync (cluster/autoscaler.py); the next one follows while anything is left
        to happen, and after a pause, at the first period boundary after the next arrival."""
        scaler.next_sync = None
        armed = [s.next_sync for s, _ in self.autoscalers.values() if s.next_sync is not None]
        self._next_sync = min(armed) if armed else None
        grow = self.autoscalers[scaler.role.name][1]
        for index in scaler.sync(now, lambda: self._grow(grow)):
            self.push(now + scaler.provision_ns, FRONTEND_ARRIVAL, self._on_replica_ready, (scaler, index))
        for index in scaler.draining():
            scaler.maybe_remove(index, now)
        # Other roles' syncs waiting in the heap are not something left to happen.
        if len(self._heap) > len(armed):
            self._arm(scaler, now + scaler.period_ns)

    def _grow(self, grow) -> int:
        worker = grow()
        worker.attach(self)
        return worker.index

    def _on_replica_ready(self, now: int, arg) -> None:
        scaler, index = arg
        scaler.on_ready(index, now)

    def after_scaled_change(self, worker: Worker, now: int) -> None:
        """Something left `worker` (a pass ended, an abort, its KV was sent): a draining
        replica may go."""
        entry = self.autoscalers.get(worker.role)
        if entry is not None:
            entry[0].maybe_remove(worker.index, now)

    def run(self, progress: ProgressFn | None = None, progress_every_s: float = 0.2) -> None:
        """Go on to the end: until no event is left."""
        self._start()
        self._until = None
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
