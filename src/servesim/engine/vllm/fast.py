"""vLLM's scheduler with decoding requests held as aggregates: the fast engine.

Same contract as `VllmScheduler` (the reference), different bookkeeping: a
request that decodes one token per pass joins a `DecodeGroup`, and a pass
costs O(1) for the whole group plus O(1) per request that does something
else (prefill chunks, admissions, finishes).

The aggregate form is exact only while the order of the running list cannot
matter. Before each pass the engine checks that every running request gets
all the tokens it asks for, or that only requests admitted after every group
member are cut by the budget. When the blocks the pass needs are not free, it
preempts in vLLM's order itself as long as every explicit running request is
newer than every member (the members then take blocks first, as one unit).
Otherwise it dissolves the group, writing each member's progress into its own
counters, and runs the reference scheduler for that pass; the members rejoin
as they decode again. `tests/test_fast_engine.py` holds the two engines to
identical records on random workloads.
"""

from __future__ import annotations

from servesim.engine.vllm.decode_group import DecodeGroup
from servesim.engine.vllm.group_runs import GroupRuns
from servesim.engine.passes import PassEntry, PassResult, SchedulerOutput
from servesim.engine.request import FINISHED, RUNNING, Request
from servesim.engine.vllm.scheduler import VllmScheduler


class FastVllmScheduler(GroupRuns, VllmScheduler):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.group = DecodeGroup(self.kv.block_size)
        self.pending: list[SchedulerOutput] = []   # scheduled passes whose outputs are not processed yet
        self._blocked: Request | None = None     # waiting head that did not fit, at kv.epoch ...
        self._blocked_epoch = -1
        self.fast_passes = 0
        self.exact_passes = 0

    # ------------------------------------------------------------------ queues

    def has_unfinished(self) -> bool:
        return bool(self.running) or bool(self.waiting) or bool(self.transferred) or bool(self.group.members)

    def exclude_warmup(self, first_measured: int) -> None:
        self.group.warmup_below = first_measured

    def _num_running(self) -> int:
        return len(self.running) + len(self.group.members)

    def held(self) -> list[Request]:
        return [*super().held(), *self.group.members.values()]

    def abort(self, request: Request) -> bool:
        # A group member is written back as an explicit running request first (no pass is
        # in flight at an abort: engine/worker.py's apply_aborts).
        if request.seq in self.group.members and self.group.members[request.seq] is request:
            self._dissolve()
        return super().abort(request)

    # ------------------------------------------------------------------ schedule

    def schedule(self) -> SchedulerOutput:
        step = self.group.step + 1
        self.group.retire_before(step)
        out = self._schedule_fast(step)
        if out is None:
            self._dissolve()
            out = super().schedule()
            self.exact_passes += 1
        else:
            self.fast_passes += 1
        if out:
            self.pending.append(out)
        return out

    def _schedule_fast(self, step: int) -> SchedulerOutput | None:
        """One pass in aggregate form, or None when the running list's order could matter."""
        kv = self.kv
        group = self.group
        budget = self.max_num_batched_tokens
        threshold = (
            self.long_prefill_token_threshold
            if self._num_running() + len(self.waiting) > 1
            else 0
        )
        members = group.active
        if members > budget:
            return None
        async_on = self.async_scheduling
        max_model_len = self.max_model_len

        # What each explicit running request would ask for, in running order.
        asks: list[tuple[Request, int]] = []
        demand = members
        for request in self.running:
            if (
                async_on
                and request.placeholders > 0
                and request.num_computed + 2 - request.placeholders >= request.prompt_len + request.max_tokens
            ):
                continue
            need = request.num_tokens + request.placeholders - request.num_computed
            if 0 < threshold < need:
                need = threshold
            room = max_model_len - request.num_computed - 1
            if room < need:   # (conditionals, not min()/max(): a builtin call parses its arguments)
                need = room
            if need > 0:
                asks.append((request, need))
                demand += need
        if demand > budget and asks and asks[0][0].seq < group.max_active_seq(step):
            return None  # the budget runs out in an order that interleaves with the members

        budget -= members
        group_need = group.blocks_needed(step) if members else 0
        blocks_needed = group_need
        plan: list[tuple[Request, int, bool]] = []
        any_joins = False
        block_size = kv.block_size
        for request, need in asks:
            if budget <= 0:
                break
            num_new = need if need < budget else budget
            slots = request.num_computed + num_new
            if slots > max_model_len:
                slots = max_model_len
            more = -(-slots // block_size) - len(request.blocks)   # ceil_div, inline
            if more > 0:
                blocks_needed += more
            joins = (num_new == 1 and request.num_computed >= request.prompt_len
                     and request.num_tokens + request.placeholders - request.num_computed == 1)
            if joins:
                any_joins = True
            plan.append((request, num_new, joins))
            budget -= num_new
        out = SchedulerOutput()
        if blocks_needed and blocks_needed > kv.num_free:   # (most steps need none: no free count)
            kv.refused = True
            if not self._allocate_with_preemption(out, step, plan):
                return None
        else:
            if group_need:   # most steps need no new block (one in block_size per member)
                kv.take(group_need, group.private_blocks)
            for request, num_new, joins in plan:
                kv.allocate(request, num_new)
                self._place(out, request, num_new, joins, step)
        if any_joins:
            self.running = [r for r in self.running if r.group_first < 0]
        if group.active:
            group.step = step
            out.group_step = step
            out.group_size = group.active
            out.group_warm = group.warm_active
            out.group_context = group.context_at(step)
            if self.names_requests:
                out.members = group.active_members(step)

        if not out.preempted:
            self._admit_waiting(out, budget, threshold)
        self._update_after_schedule(out)
        out.num_tokens += out.group_size
        return out

    def _admit_waiting(self, out: SchedulerOutput, budget: int, threshold: int) -> Request | None:
        waiting = self.waiting
        if not waiting and not self.transferred:
            self._blocked = None
            return None
        if (
            waiting
            and not self.transferred
            and waiting[0] is self._blocked
            and self.kv.epoch == self._blocked_epoch
        ):
            return self._blocked  # nothing freed or cached since it last did not fit
        blocked = super()._admit_waiting(out, budget, threshold)
        self._blocked = blocked
        self._blocked_epoch = self.kv.epoch
        return blocked

    # ------------------------------------------------------------------ exact fallback

    def _in_flight_group_pass(self) -> tuple[int, SchedulerOutput | None]:
        """The group step whose outputs are still in flight (0 if none), and its pass (None if
        none, or if that pass is a fast-forwarded run, whose members cannot be taken apart)."""
        group = self.group
        if group.step <= group.done_step:
            return 0, None
        step = group.step
        in_flight_pass = next((p for p in self.pending if p.group_step == step), None)
        if in_flight_pass is None or in_flight_pass.run is not None:
            return step, None
        return step, in_flight_pass

    def _detach(self, member: Request, in_flight_step: int, in_flight_pass: SchedulerOutput | None) -> bool:
        """Write a member's progress into its own counters and blocks, as an explicit running request.

        Its token in the pass in flight (if any) becomes an explicit entry of that pass, and
        True is returned; the caller fixes that pass's group share and the group's records.
        """
        group = self.group
        first, final = member.group_first, member.group_final
        computed_in_flight = member.group_computed + (in_flight_step - first)
        flying = group.settle(member, group.step, group.done_step)
        if group.done_step >= first:
            member.last_token_ns = group.done_end_ns
        if flying:
            member.in_flight += flying
            if self.async_scheduling:
                member.placeholders += flying
            entry = PassEntry(member, 1, computed_in_flight, "running")
            entry.samples = True
            entry.is_decode = True
            in_flight_pass.entries.append(entry)
        elif in_flight_pass is not None and first <= in_flight_step <= final:
            raise AssertionError("a member active in the pass in flight has no token in flight")
        frontier = member.num_computed - (member.placeholders if self.async_scheduling else 0)
        self.kv.cache_full_blocks(member, frontier)
        member.is_prefill_chunk = False
        return bool(flying)

    def _dissolve(self) -> None:
        """Turn every member back into an explicit running request (exact counters and blocks)."""
        group = self.group
        if not group.members:
            group.reset()
            return
        in_flight_step, in_flight_pass = self._in_flight_group_pass()
        assert not in_flight_step or in_flight_pass is not None, (
            "the exact path cannot take over while a fast-forwarded run is in flight")
        if in_flight_pass is not None:
            in_flight_pass.group_step = 0
        for member in sorted(group.members.values(), key=lambda r: r.seq):
            self._detach(member, in_flight_step, in_flight_pass)
        if in_flight_pass is not None:
            # The members' tokens now arrive explicitly; none remains in aggregate.
            in_flight_pass.entries.sort(key=lambda e: e.request.seq)
            in_flight_pass.group_size = in_flight_pass.group_warm = 0
            in_flight_pass.members = ()
        assert not group.private_blocks, "decode group lost track of its blocks"
        self.running = sorted(self.running + list(group.members.values()), key=lambda r: r.seq)
        group.reset()

    # ------------------------------------------------------------------ preemption in aggregate form

    def _place(self, out: SchedulerOutput, request: Request, num_new: int, joins: bool, step: int) -> None:
        if joins:
            self.group.join(request, step)
        else:
            out.entries.append(PassEntry(request, num_new, request.num_computed, "running"))

    def _allocate_with_preemption(self, out: SchedulerOutput, step: int,
                                  plan: list[tuple[Request, int, bool]]) -> bool:
        """Blocks run short: vLLM's running loop with preemption, the group handled as one unit.

        vLLM hands blocks out in running order; the first request that finds none free
        preempts the newest running request (whose blocks join the free queue) and tries
        again; a request that preempts itself ends the loop. When every explicit running
        request is newer than every member, the members come first as one unit: they drain
        every free block, then the freed blocks of each victim (the explicit requests from
        the newest, then the newest members) while they still need blocks; the explicit
        requests follow one by one. Requests that got blocks are never the ones preempted.
        Returns False, having changed nothing, when the order interleaves or a
        fast-forwarded run is in flight.
        """
        group = self.group
        kv = self.kv
        running = self.running
        in_flight_step, in_flight_pass = self._in_flight_group_pass()
        if group.members:
            if running and running[0].seq < group.newest_member(step).seq:
                return False
            if in_flight_step and in_flight_pass is None:
                return False
        pool = group.private_blocks
        taken = 0
        while True:
            rest = group.blocks_needed(step) - taken if group.active else 0
            if rest <= 0:
                break
            available = kv.num_free
            if available:
                grab = min(rest, available)
                kv.take(grab, pool)
                taken += grab
                continue
            if running:
                victim = running.pop()
            else:
                victim = group.newest_member(step)
                if self._detach(victim, in_flight_step, in_flight_pass):
                    in_flight_pass.group_size -= 1
                    if group.is_warm(victim):
                        in_flight_pass.group_warm -= 1
                    if in_flight_pass.members:
                        in_flight_pass.members = [m for m in in_flight_pass.members if m is not victim]
                    in_flight_pass.entries.sort(key=lambda e: e.request.seq)
                group.remove(victim, step)
            self._preempt(victim)
            out.preempted.append(victim)
        for request, num_new, joins in plan:
            if request.status != RUNNING:
                break   # preempted as a victim, and so is everyone after it
            while not kv.allocate(request, num_new):
                victim = running.pop()
                self._preempt(victim)
                out.preempted.append(victim)
                if victim is request:
                    break
            if request.status != RUNNING:
                break
            self._place(out, request, num_new, joins, step)
        return True

    # ------------------------------------------------------------------ outputs

    def update_from_output(self, result: PassResult) -> None:
        done = result.scheduled
        if self.pending and self.pending[0] is done:
            self.pending.pop(0)
        else:
            self.pending.remove(done)
        finished = result.finished
        delivered = result.delivered
        ending: list[Request] = []
        async_on = self.async_scheduling
        for entry in done.entries:
            request = entry.request
            request.in_flight -= entry.tokens
            stale = request.stale > 0
            if stale:
                request.stale -= entry.tokens
            if request.status == FINISHED or not entry.samples:
                continue
            was_running = request.status == RUNNING
            request.num_output += 1
            delivered.append(request)
            if async_on:
                if not stale:
                    request.placeholders -= 1
                if was_running and request.group_first < 0:
                    self.kv.cache_full_blocks(request, request.num_computed - request.placeholders)
            if request.group_first < 0 and (
                request.num_output >= request.max_tokens or request.num_tokens >= self.max_model_len
            ):
                request.status = FINISHED
                ending.append(request)

        step = done.group_step
        group = self.group
        run = done.run
        if step and run is not None:
            # A fast-forwarded run: only regular deliveries, each one pass after the last
            # (members that joined at its first step too: see quiet_steps; the worker set
            # result.aggregate); members whose last token came from its last step leave.
            group.joined_at.pop(step, None)
            self._leave_at(step + run.steps - 1, result.end_ns, ending)
            step = 0
        if step:
            joiners = group.joined_at.pop(step, [])
            delivered.extend(joiners)
            regular = done.group_size - len(joiners)
            if regular:
                warm = done.group_warm
                if warm:
                    warm -= sum(1 for r in joiners if group.is_warm(r))
                result.aggregate = regular - warm
                result.gap_ns = result.end_ns - group.done_end_ns
            self._leave_at(step, result.end_ns, ending)

        if ending:
            ending.sort(key=lambda r: r.seq)
            stopped_running = set()
            for request in ending:
                self.kv.cache_full_blocks(request, request.num_computed)
                if not request.hold_kv:
                    self.kv.free(request)
                finished.append(request)
                if request in self.waiting:
                    self.waiting.remove(request)
                else:
                    stopped_running.add(request.request_id)
            if stopped_running:
                self.running = [r for r in self.running if r.request_id not in stopped_running]

    def _leave_at(self, step: int, end_ns: int, ending: list[Request]) -> None:
        """Group step `step`'s outputs are in (its pass, or a run's last, ended at `end_ns`):
        members whose last token it was leave the group, finished."""
        group = self.group
        for member in group.depart_at.pop(step, ()):
            if member.group_first != step:  # a joiner's delivery goes through `delivered`
                member.last_token_ns = end_ns
            group.settle(member, step, step)
            del group.members[member.seq]
            member.status = FINISHED
            ending.append(member)
        group.done_step = step
        group.done_end_ns = end_ns
