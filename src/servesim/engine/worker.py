"""One engine process: when it reads arrivals, commits passes and runs them.

This follows vLLM's engine core loop (`v1/engine/core.py`, vLLM 0.32):

- Synchronous (`EngineCore.step`): at each pass end the outputs are processed,
  every request that has arrived by then (arrival <= now) is read, and the
  next pass is scheduled and starts at once.
- Async scheduling (`EngineCore.step_with_batch_queue`, a batch queue of two):
  while pass k runs, pass k+1 is already committed. At the end of pass k the
  engine processes k's outputs, the committed pass k+1 starts, and only then
  are new arrivals read and pass k+2 committed behind it. So an arrival during
  pass k first runs in pass k+2. An arrival at exactly a pass end counts as a
  reaction to that pass's outputs and is read at the next pass end, unless the
  engine is idle then (nothing running or waiting after reading earlier
  arrivals): an idle engine admits an arrival in a pass starting at the
  arrival time. When the committed pass turns out empty (its requests already
  have every token scheduled) it takes no time, and the GPU is free: the next
  pass starts at the pass end, and one more is committed behind it.

Events at one instant are handled in this order: pass ends, frontend
arrivals, engine arrivals, scheduler calls (see cluster/simulation.py).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections import deque
from itertools import accumulate

from servesim.engine.events import EventSink
from servesim.engine.passes import PassResult, SchedulerOutput
from servesim.engine.request import Request, Status
from servesim.engine.scheduler_core import SchedulerCore
from servesim.timing.base import PassShape, TimingModel


class Worker:
    def __init__(
        self,
        name: str,
        scheduler: SchedulerCore,   # any backend's (engine/<backend>/scheduler.py)
        timing: TimingModel,
        async_scheduling: bool,
        late_follow: bool = False,
        commit_at_pass_end: bool = False,
    ) -> None:
        self.name = name
        self.role = name.rsplit("-", 1)[0]
        self.index = 0
        self.scheduler = scheduler
        self.timing = timing
        self.fixed_ns = timing.fixed_ns()   # fixed timing: no pass shape to build (TimingModel.fixed_ns)
        self.async_scheduling = async_scheduling
        self.events: EventSink | None = None   # the loop it runs in (attach)
        self._calls_unseen = False   # see attach
        self.intake: deque[Request] = deque()   # arrived, not yet read by the engine
        self.executing: PassResult | None = None
        self.queued: SchedulerOutput | None = None  # async: committed, waits for the GPU
        self.call_pending = False
        self.num_passes = 0
        self.busy_ns = 0
        self.pending_preempted: list[Request] = []  # preemptions of empty scheduler calls
        self.min_pass_ns = timing.min_pass_ns()
        self.fast_forward = scheduler.fast_forwards   # engine/events.py's FastForward
        self._last_call_preempted = False
        # Engine arrivals routed here, not yet delivered (a heap): a request's path to the engine
        # takes longer for a longer prompt, so they do not arrive in the order they were routed.
        self._arrivals_due: list[int] = []
        self._last_launched: SchedulerOutput | None = None   # sync: the pass the last call started
        self._run_calls = 0     # scheduler calls a fast-forwarded run stood for, not yet counted
        # Async runs may commit their follow-up pass at their second-to-last pass end (see
        # _fast_forward); the cluster allows it where only arrivals can reach a worker then.
        self.late_follow = late_follow
        self.aborts: list[Request] = []   # aborted, not yet dropped (see apply_aborts)
        # A decode worker under disaggregation admits a handoff at its next pass, as with
        # async scheduling off (docs/modeling/disaggregation.md): under async scheduling it
        # commits each follow-up pass at the end of the pass before it, not as that one starts.
        self.commit_at_pass_end = commit_at_pass_end
        # The scheduler call behind a run comes as the run starts (async, committed at once), so a
        # scheduler may commit that pass with the run (engine/sglang/behind.py).
        scheduler.behind_at_run_start = async_scheduling and not commit_at_pass_end and not late_follow

    def attach(self, events: EventSink) -> None:
        self.events = events
        # A worker that commits at pass ends (async) skips the scheduler call behind a pass it
        # starts there, where the loop's horizons never read pending events (on_pass_end).
        self._calls_unseen = (self.commit_at_pass_end and self.async_scheduling
                              and events.scheduled_arrivals)

    # ------------------------------------------------------------------ events

    def expect_arrival(self, t: int) -> None:
        heapq.heappush(self._arrivals_due, t)

    def next_engine_arrival(self) -> int | None:
        return self._arrivals_due[0] if self._arrivals_due else None

    def next_output_bound(self, now: int) -> int | None:
        """A lower bound on the end of this worker's next pass that delivers a token (None: only
        an arrival or a wake-up, which other horizons already cover, can start one).

        A prefill worker hands a request over exactly when a pass samples its first token. If
        the pass running now samples nothing, whatever runs next starts when it ends and lasts
        at least the timing model's shortest pass.
        """
        shortest = self.min_pass_ns
        executing = self.executing
        if executing is not None:
            for entry in executing.scheduled.entries:
                if entry.samples:
                    return executing.end_ns
            return executing.end_ns + shortest
        if self.call_pending or self.intake:
            return now + shortest
        arrival = self.next_engine_arrival()
        return None if arrival is None else arrival + shortest

    def on_engine_arrival(self, now: int, request: Request) -> None:
        heapq.heappop(self._arrivals_due)   # arrivals are delivered in time order: this one is the earliest
        request.worker = self.name
        self.intake.append(request)
        if self.executing is None and not self.call_pending:
            self._request_call(now)

    def wake(self, now: int) -> None:
        """Something outside the engine changed (blocks freed, a KV transfer arrived): call the scheduler."""
        if self.executing is None and not self.call_pending:
            self._request_call(now)

    def on_pass_end(self, now: int, done: PassResult) -> None:
        self.executing = None
        if self.commit_at_pass_end and self.async_scheduling:
            # Decided with `done` still unprocessed, as at its start, but seeing what came since.
            follow = self._schedule()
            if follow:
                self.queued = follow
        self.scheduler.update_from_output(done)
        self.events.on_pass_done(self, done)
        call_at = now
        if self.queued is not None:
            call_at = self._start(self.queued, now)
            self.queued = None
            if self._calls_unseen and call_at == now and self.executing.end_ns > now:
                # Committing at pass ends, its call now would find this pass in flight and do
                # nothing; no horizon reads pending events, so none is pushed.
                return
        self._request_call(call_at)

    def requests(self) -> list[Request]:
        """Every request this worker holds: arrived and unread, or in its scheduler."""
        return [*self.intake, *self.scheduler.held()]

    def abort(self, request: Request, now: int) -> None:
        """Drop `request` at this engine's next scheduler call with no pass in flight (apply_aborts)."""
        self.aborts.append(request)
        self.wake(now)

    def apply_aborts(self, now: int) -> None:
        """Drop the aborted requests and free their blocks, as the engine does between steps.

        An engine reads aborts from its input queue between passes (vLLM's EngineCore before
        `Scheduler.finish_requests(..., FINISHED_ABORTED)`); servesim applies them at a
        scheduler call with no pass in flight, so no pass's outputs refer to a dropped request.
        A request whose last token came first is left alone (an abort of a finished request
        does nothing upstream either); one still on its way to the engine waits for it.
        """
        kept = []
        for request in self.aborts:
            if request.status == Status.FINISHED:
                continue
            if request in self.intake:
                self.intake.remove(request)
            elif not self.scheduler.abort(request):
                kept.append(request)   # its engine arrival is still to come
                continue
            request.status = Status.ABORTED
            self.events.on_aborted(self, request, now)
        self.aborts = kept

    def on_scheduler_call(self, now: int, _: object = None) -> None:
        self.call_pending = False
        scheduler = self.scheduler
        if self.aborts and self.executing is None:
            self.apply_aborts(now)
        if not self.async_scheduling:
            if self._last_launched is None:   # the engine ran nothing since: its loop reads at once
                self._idle_reads()
                reads = True
            else:
                reads = scheduler.reads_every_call or self._reads_arrivals(self._last_launched)
            if reads:
                self._read_intake(now, inclusive=True)
            first = self._schedule_nonempty()
            if first is None and not reads and self.intake:
                # Nothing to run: the engine's loop spins and reads what waits at once.
                self._idle_reads()
                self._read_intake(now, inclusive=True)
                first = self._schedule_nonempty()
            self._last_launched = first
            if first is not None:
                self._start(first, now)
            return
        if self.executing is None:
            self._idle_reads()   # nothing runs: the engine's loop reads at once
            self._read_intake(now, inclusive=False)
            if not scheduler.has_unfinished():
                self._read_intake(now, inclusive=True)
            first = self._schedule_nonempty()
            if first is None:
                return
            call_at = self._start(first, now)
            if call_at != now:   # a run whose follow-up pass is committed late
                self._request_call(call_at)
                return
            if self.commit_at_pass_end:
                return
        elif self.commit_at_pass_end:
            return
        elif self.aborts:
            # Commit nothing behind the pass in flight: at its end no pass is in flight, and
            # the aborts apply (a batch queue drained for them; docs/modeling/abort.md).
            return
        elif scheduler.reads_every_call or self._reads_arrivals(self.executing.scheduled):
            self._read_intake(now, inclusive=False)
        follow = self._schedule()
        if follow:
            self.queued = follow

    # ------------------------------------------------------------------ internals

    def _idle_reads(self) -> None:
        self._run_calls = 0
        self.scheduler.idle_reads()

    def _reads_arrivals(self, last_launched: SchedulerOutput | None) -> bool:
        """Does this scheduler call read arrivals? Asked once per call: the backend may count calls."""
        skipped, self._run_calls = self._run_calls, 0
        return self.scheduler.reads_arrivals(last_launched, skipped)

    def _request_call(self, now: int) -> None:
        if self.call_pending:
            return
        self.call_pending = True
        self.events.push_scheduler_call(now, self)

    def _read_intake(self, now: int, inclusive: bool) -> None:
        intake = self.intake
        add = self.scheduler.add_request
        while intake and (
            intake[0].engine_arrival_ns < now or (inclusive and intake[0].engine_arrival_ns == now)
        ):
            add(intake.popleft())

    def _schedule(self) -> SchedulerOutput:
        decided = self.scheduler.schedule()
        decided.free_blocks = self.scheduler.kv.num_free
        self._last_call_preempted = bool(decided.preempted)
        if decided.preempted or self.pending_preempted:
            if not decided:
                self.pending_preempted.extend(decided.preempted)
            else:
                decided.preempted = self.pending_preempted + decided.preempted
                self.pending_preempted = []
        return decided

    def _schedule_nonempty(self) -> SchedulerOutput | None:
        """Schedule until a pass has tokens; None if the engine has nothing it can run now.

        An empty call that preempted something is retried at once (the preempted requests can
        be admitted by the next call). An empty call that did not leaves the engine idle until
        something outside it changes: an arrival, or KV blocks a disaggregated prefill was
        holding for a transfer coming free (the worker is woken then).
        """
        for _ in range(8):
            if not self.scheduler.has_unfinished():
                return None
            decided = self._schedule()
            if decided:
                return decided
            if not self._last_call_preempted:
                return None
        # A scheduler call that frees nothing and admits nothing would repeat forever.
        raise RuntimeError(f"{self.name}: the scheduler made no progress (this is a servesim bug)")

    def _fast_forward(self, decided: SchedulerOutput, now: int, first_duration: int) -> int:
        """Let `decided` stand for a run of identical decode passes when nothing can change.

        The run stops before the pass end at which the next pending event (an arrival,
        another worker's output) could be read: every pass end inside the run comes
        strictly before it. Returns the run's total duration, or 0 for no run.
        """
        upcoming = self.events.horizon(self)
        scheduler = self.scheduler
        # Under async scheduling the call at a pass end commits the pass after the next: a
        # run's passes are committed by the time its third-to-last pass ends, and the pass
        # after the run at its second-to-last pass end. When the scheduler lets that commit
        # wait for its pass end (instead of making it as the run starts), it reads what
        # arrived by then, so only the pass ends before it must come before the horizon: the
        # run may take one more pass. Unless a member leaves in the pass before that extra
        # one: its blocks are freed when the run starts, and the horizon's event (a router's
        # decision, say) may come before that pass end, while the engine still holds them.
        ahead = 1 if self.late_follow else 0
        limit = 1 << 40
        if upcoming is not None:
            # Passes that only decode get no shorter as contexts grow: an upper bound.
            limit = (upcoming - now - 1) // first_duration + 1 + ahead
            if limit < 2:
                return 0
        steps = scheduler.quiet_steps(decided, limit, now)
        if steps < 2:
            return 0
        uniform = self.timing.uniform_decode_ns()
        if uniform is not None:
            if upcoming is not None:   # the pass ends now + i·uniform must come before it
                steps = self._within_horizon(decided, steps, (upcoming - now - 1) // uniform + 1)
                if steps < 2:
                    return 0
            scheduler.extend(decided, steps, None, uniform)
            return steps * uniform
        # Plain ints from here: a run is often a handful of passes, where numpy calls cost more
        # than the work.
        durations = []
        for count, batch, context in scheduler.run_segments(decided, steps):
            durations += self.timing.decode_steps_list(batch, context, count)
        ends = list(accumulate(durations))   # after `now`
        if upcoming is not None:
            steps = self._within_horizon(decided, steps, bisect_left(ends, upcoming - now) + 1)
            if steps < 2:
                return 0
            del durations[steps:]
        scheduler.extend(decided, steps, durations)
        return ends[steps - 1]

    def _within_horizon(self, decided: SchedulerOutput, steps: int, before: int) -> int:
        """`steps` cut to what the horizon allows. `before` is the most passes whose ends,
        all but the last, come before it; a late commit allows one more, unless a member
        leaves in the pass before that one (see _fast_forward)."""
        if not self.late_follow:
            return min(steps, before)
        if steps > before and self.scheduler.is_final(decided.group_step + before - 1):
            return before
        return min(steps, before + 1)

    def keep_pass_details(self) -> None:
        """A pass log or per-request token times are asked for: results must name every request."""
        self.scheduler.keep_pass_details()

    def _pass_ns(self, decided: SchedulerOutput) -> int:
        """The pass's duration from the timing model; fixed timing builds no pass shape."""
        fixed = self.fixed_ns
        return fixed if fixed is not None else self.timing.duration_ns(PassShape.of(decided))

    def _start(self, decided: SchedulerOutput, now: int) -> int:
        """Start `decided` at `now` (perhaps as a run); returns when the engine next calls
        the scheduler: now, or for a run committing its follow-up late, its second-to-last
        pass end."""
        result = PassResult(decided, self.num_passes, now)
        # A pass that admits host-tier prefix hits waits for their copy back to the GPU.
        duration = self._pass_ns(decided) + decided.load_ns
        steps = 1
        if self.fast_forward and not self.intake and not self.aborts and self.scheduler.may_run(decided):
            duration = self._fast_forward(decided, now, duration) or duration
            run = decided.run
            if run is not None:
                steps = run.steps
                result.run = run
                result.aggregate = run.per_pass
                for early in run.early:
                    early.index += result.index
                    self.events.push_early_record(early.end_ns, self, early)
                    # The run's own result reports the passes after its early ones.
                    result.start_ns = early.end_ns
                result.index += run.early_steps
                if not self.scheduler.reads_every_call:
                    self._run_calls += steps - 1   # one engine call per pass end inside the run
        self.num_passes += steps
        result.end_ns = now + duration
        self.busy_ns += duration
        for entry in decided.entries:
            if entry.request.first_scheduled_ns is None:
                entry.request.first_scheduled_ns = now
        self.executing = result
        self.events.push_pass_end(result.end_ns, self, result)
        if steps > 1 and self.late_follow:
            durations = decided.run.durations
            return result.end_ns - (durations[-1] if durations is not None else decided.run.gap_ns)
        return now
