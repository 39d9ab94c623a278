"""The simulation behind the live server: a clock, one driver task, and per-request streams.

The server's clock reads wall time since start x `speed` (simulated ns). A request enters
the simulation at its arrival on that clock; the driver task steps the simulation with
`run_until(clock)` and hands each delivery to its request's queue once the clock reaches
it (the engine's delivery time plus the request path's output time, as the batch records
count it). Its lag, the clock at hand-over minus the due time, is the server's own pacing
error in simulated time (`servesim:lag_seconds` on /metrics; a warning past
`serve.lag_warn_ms`). Everything runs on the one asyncio loop: no locks.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from servesim import limits
from servesim.cluster.build import build_cluster
from servesim.cluster.engine_choice import choose_engines
from servesim.config import load_config
from servesim.config.resolution import resolve
from servesim.engine.request import Request
from servesim.errors import ServesimError
from servesim.metrics.collector import Collector
from servesim.seeds import rng_for
from servesim.serve.prompts import PromptCounter
from servesim.serve.settings import ServeConfig
from servesim.workload.clients import ScheduledClient
from servesim.workload.trace import TraceRequest

ROLE = "aggregated"


@dataclass
class Stream:
    """One request in flight: what the engine has delivered to the client so far."""

    request_id: int
    prompt_tokens: int
    target: int                       # output tokens it will get (its finish reason says why)
    finish_reason: str                # "length" (max_tokens reached) or "stop" (the drawn EOS)
    arrival_ns: int
    delivered: int = 0
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)

    @property
    def finished(self) -> bool:
        return self.delivered >= self.target


class _LiveCollector(Collector):
    """The batch collector, telling the server of each finished request too."""

    def __init__(self, warmup: int, on_done) -> None:
        super().__init__(None, warmup)
        self._on_done = on_done

    def on_request_done(self, request: Request) -> None:
        super().on_request_done(request)
        self._on_done(request)


class LiveSimulation:
    def __init__(self, config: Any, overrides: list | None = None, speed: float = 1.0, metrics=None,
                 clock=None, lengths_purpose: str = "serve-output-length") -> None:
        if not (0 < speed < math.inf):
            raise ServesimError(f"--speed must be a positive finite number, got {speed}")
        loaded = load_config(config, list(overrides or []))
        limits.check_config(loaded.config, loaded.source)
        spec = resolve(loaded)
        if spec.disaggregated:
            raise ServesimError(f"{loaded.source}: servesim serve runs aggregated fleets only (aborts under "
                                "prefill/decode disaggregation are not modelled)")
        self.spec = spec
        self.settings = loaded.config.serve or ServeConfig()
        self.speed = speed
        self.metrics = metrics
        engines = choose_engines(spec, pass_log=False, token_times=False, on_token=True)
        self.engines = engines
        self.collector = _LiveCollector(spec.warmup_requests, self._on_request_done)
        self.sim = build_cluster(spec, engines, ScheduledClient(iter(())), self.collector, on_token=self._on_token)
        self.factory = self.sim.factories[ROLE]
        self.counter = PromptCounter(self.settings, loaded.base_dir, self.factory.trace_block_size)
        self.outbound_ns = spec.request_path.outbound_ns
        self._lengths = rng_for(spec.seed, lengths_purpose)
        self.streams: dict[int, Stream] = {}
        self.submitted: list[TraceRequest] = []
        # By request, for /metrics: (outputs the engine has produced, the last one's time, its worker).
        self._engine_counts: dict[int, tuple[int, int, str]] = {}
        self._due: list[tuple[int, int, int, int]] = []   # (due ns, seq, request id, outputs so far)
        self._seq = 0
        self._t0 = time.monotonic_ns()
        self._clock = clock   # tests: a function giving simulated ns; None: wall time x speed
        self._wake = asyncio.Event()
        self.lag_ns = 0          # the last hand-over's lag
        self.max_lag_ns = 0
        self._warned = False

    # ------------------------------------------------------------------ the clock

    def clock_ns(self) -> int:
        if self._clock is not None:
            return self._clock()
        return int((time.monotonic_ns() - self._t0) * self.speed)

    @property
    def max_model_len(self) -> int:
        return self.factory.sched.context_limit

    def output_room(self, prompt_tokens: int) -> int:
        return self.factory.sched.output_room(prompt_tokens)

    def reject_reason(self, prompt_tokens: int) -> str | None:
        return self.factory.reject_reason(prompt_tokens)

    # ------------------------------------------------------------------ requests in and out

    def draw_output_length(self) -> int:
        lengths = self.settings.output_length
        return int(self._lengths.integers(lengths.min, lengths.max + 1))

    def submit(self, prompt_ids: list[int], target: int, finish_reason: str, trace_id: str) -> Stream:
        """Enter a request (its prompt's token ids, `target` outputs) at the clock's time now."""
        request_id = len(self.submitted)
        at = max(self.clock_ns(), self.sim.now)
        request = TraceRequest(request_id, at, len(prompt_ids), target, self.counter.hash_ids(prompt_ids),
                               trace_id=trace_id)
        self.submitted.append(request)
        stream = Stream(request_id, len(prompt_ids), target, finish_reason, at)
        self.streams[request_id] = stream
        self.sim.submit(request, at)
        self._wake.set()
        return stream

    def abort(self, stream: Stream) -> None:
        """The client went away: the engine drops the request as it drops an aborted one."""
        if self.streams.pop(stream.request_id, None) is None or stream.finished:
            return
        self.sim.abort(stream.request_id, max(self.clock_ns(), self.sim.now))
        self._wake.set()

    def _on_token(self, request_id: int, t_ns: int, outputs: int) -> None:
        counts = self._engine_counts
        if self.metrics is not None:
            if request_id not in counts:
                counts[request_id] = (0, t_ns, self._worker_of(request_id))
                self.metrics.on_prefilled(self.submitted[request_id].input_length, counts[request_id][2])
            before, last_ns, worker = counts[request_id]
            self.metrics.on_generated(outputs - before, worker)
            if before:
                self.metrics.on_token_gap(t_ns - last_ns, worker)
            counts[request_id] = (outputs, t_ns, worker)
        self._seq += 1
        heapq.heappush(self._due, (t_ns + self.outbound_ns, self._seq, request_id, outputs))

    def _worker_of(self, request_id: int) -> str:
        # Once per request, at its first token: the workers' own lists are short.
        for role in self.sim.roles.values():
            for worker in role.workers:
                if any(r.request_id == request_id for r in worker.requests()):
                    return worker.name
        return ""

    def _on_request_done(self, request: Request) -> None:
        self._engine_counts.pop(request.request_id, None)
        if self.metrics is not None:
            self.metrics.on_finished(request)

    # ------------------------------------------------------------------ the driver

    def advance(self) -> None:
        """Step the simulation to the clock and hand over every delivery now due."""
        now = self.clock_ns()
        if now + 1 > self.sim.now:
            self.sim.run_until(now + 1)   # events at `now` too
        due = self._due
        if not due:
            return
        now = self.clock_ns()
        while due and due[0][0] <= now:
            at, _, request_id, outputs = heapq.heappop(due)
            self._note_lag(now - at)
            stream = self.streams.get(request_id)
            if stream is None:
                continue   # aborted
            stream.delivered = outputs
            stream.queue.put_nowait(outputs)
            if stream.finished:
                del self.streams[request_id]

    def _note_lag(self, lag: int) -> None:
        self.lag_ns = lag
        if lag > self.max_lag_ns:
            self.max_lag_ns = lag
        if self.metrics is not None:
            self.metrics.on_lag(lag)
        if not self._warned and lag > self.settings.lag_warn_ms * 1e6:
            self._warned = True
            sys.stderr.write(f"warning: the simulation runs {lag / 1e6:.1f} ms (simulated) behind the clock, past "
                             f"serve.lag_warn_ms ({self.settings.lag_warn_ms:g}): lower --speed or the load\n")

    def next_wake_ns(self) -> int | None:
        times = [t for t in (self.sim.next_event_time(), self._due[0][0] if self._due else None) if t is not None]
        return min(times) if times else None

    async def drive(self) -> None:
        """Forever: step, then sleep until the next event or delivery is due, or a request comes."""
        if not self.submitted:
            self._t0 = time.monotonic_ns()   # the clock starts with the server
        while True:
            self.advance()
            wake = self.next_wake_ns()
            self._wake.clear()
            delay = None if wake is None else max(0.0, (wake - self.clock_ns()) / self.speed / 1e9)
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except asyncio.TimeoutError:
                pass

    # ------------------------------------------------------------------ stopping

    def stop(self) -> None:
        """At the clock's time now: abort what is in flight and run the engine dry."""
        at = max(self.clock_ns(), self.sim.now)
        for stream in list(self.streams.values()):
            self.abort(stream)
        self.sim.run_until(at + 1)
        self.sim.run()
