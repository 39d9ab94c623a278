"""Fast-forwarded runs of the decode group's steps (vLLM's fast engine).

A pass that only advances the decode group (engine/vllm/decode_group.py) can stand for
a run of such passes while nothing can change what the scheduler decides: no other
running request, no admission possible, enough free blocks for every step, and no
outside event before the run's last pass end (the worker's horizon, engine/worker.py).

A member's last token changes only the batch: the steps after it decode fewer
members. When the finish is quiet as well, the run goes on past it:

- nothing waits in the engine, so the blocks and the request slot it frees can
  admit nobody before the run ends;
- the workload's arrivals do not depend on completions (open loop), and no prefill
  worker waits for this worker's blocks (aggregated serving), so nothing outside
  the engine reacts to the finish before the horizon either.

The run then holds the group's membership as segments between finishes (for step
durations, tokens and inter-token gaps), and replays, when it starts, the block
traffic of its steps in vLLM's order: each step's new blocks, and after each
leaving member's last step its blocks freed (keyed as they fill, the tail first),
interleaved as the engine interleaves them. Sync scheduling frees a step's finished
requests before it schedules the next step; async scheduling has committed the next
step already, so the frees come one step later in the order. Every step's blocks
come from the blocks free when the run starts, so no step can run short; but a
freed block can still be the next one taken (unkeyed blocks are reused first), which
is why the order is replayed rather than summed. The passes up to each finish are
reported as a result of their own at that pass end (`PassRun.early`),
so routers, records and KV samples see the finish when the engine would.
"""

from __future__ import annotations

from itertools import accumulate

from servesim.engine.passes import PassResult, PassRun, SchedulerOutput
from servesim.engine.request import FINISHED, Request


class GroupRuns:
    """Mixin over `FastVllmScheduler`: the worker's fast-forward interface."""

    _run_start = 0
    _run_crosses = False   # the run being planned may go on past members' last steps
    commits_follow_late = True
    fast_forwards = True   # engine/events.py's FastForward

    def is_final(self, step: int) -> bool:
        """Is `step` some active member's last, inside a run that goes past finishes?"""
        return self._run_crosses and bool(self.group.retire_at.get(step))

    def may_run(self, decided: SchedulerOutput) -> bool:
        """Could `decided` start a run (a pure group step)? quiet_steps says how long."""
        return bool(decided.group_size) and not decided.entries

    def quiet_steps(self, decided: SchedulerOutput, limit: int, now: int) -> int:
        """How many passes, starting with `decided` (starting at `now`), are group steps that
        nothing but the group's own finishes can change.

        `decided` (a pure group step, about to start) can stand for a run of such passes
        while: no other running request, no admission possible (nothing waiting, or its
        head still does not fit, or no slot, or no budget), and enough free blocks for
        every step. With something waiting, or when a finish is not quiet, the run ends
        with the step that gives the first member its last token: the freed blocks or
        slot could change what happens next. Otherwise it may go on until the last
        member's last token. The caller also stops the run before any other event (an
        arrival) could be read.

        Members that join at `decided` ride the run like the others when their previous
        token (their first) came at `now`, as every other member's did: then each of
        their gaps is one pass too. Otherwise their first decode is a pass of its own.
        """
        group = self.group
        step = decided.group_step
        if (decided.entries or self.running or self.transferred
                or decided.group_size != group.active or group.step != step):
            return 0
        joiners = group.joined_at.get(step)
        if joiners and not (
            all(r.last_token_ns == now for r in joiners)
            and (len(joiners) == group.active or group.done_end_ns == now)
        ):
            return 0
        waiting = self.waiting
        if waiting and not (
            (waiting[0] is self._blocked and self.kv.epoch == self._blocked_epoch)
            or self._seqs_full()
            or group.active >= self.max_num_batched_tokens
        ):
            return 0
        crosses = self.finishes_are_quiet and not waiting
        earliest = group.earliest_final(step)   # asked either way: it prunes the heap of finals
        cap = min(limit, (group.latest_final if crosses else earliest) - step + 1)
        if cap < 2:
            return 0
        self._run_start = now
        self._run_crosses = crosses
        # The blocks of every step after the first (already allocated) must be free, counted
        # as if no member left: more than the run needs when some do, never less.
        if not self.async_scheduling:
            steps = group.steps_within(step + 1, cap - 1, self.kv.num_free)
            if steps < cap - 1:
                self.kv.refused = True   # free blocks may have cut the run (engine/kv/cache.py)
            return 1 + steps
        # Async: the pass after the run is committed as the run starts, one pass earlier
        # than vLLM would; its blocks must be free too, so that commit needs nothing else
        # (counted with every member, so also with those that leave at the run's end).
        steps = group.steps_within(step + 1, cap, self.kv.num_free)
        if steps < cap:
            self.kv.refused = True
        return steps

    def _finals_within(self, first: int, last: int) -> list[int]:
        """The steps in [first, last) that are some active member's last, in order."""
        if not self._run_crosses:
            return []   # the run ends at the first member's last step
        retire_at = self.group.retire_at
        return [step for step in self.group.finals_between(first, last) if retire_at[step]]

    def run_segments(self, decided: SchedulerOutput, steps: int) -> list[tuple[int, int, int]]:
        """The run's steps as (steps, decoding requests, their total context in the first)."""
        group = self.group
        first = decided.group_step
        active, base = group.active, group.context_base
        segments = []
        start = first
        for final in self._finals_within(first, first + steps - 1):
            segments.append((final - start + 1, active, base + active * start))
            for member in group.retire_at[final]:
                active -= 1
                base -= member.group_offset + 1
            start = final + 1
        segments.append((first + steps - start, active, base + active * start))
        return segments

    def extend(self, decided: SchedulerOutput, steps: int, durations, uniform_ns: int = 0) -> None:
        """Make `decided` stand for `steps` group steps (see quiet_steps), each lasting its entry
        of `durations`, or `uniform_ns` when `durations` is None."""
        group = self.group
        first = decided.group_step
        last = first + steps - 1
        run = decided.run = PassRun(steps, durations, uniform_ns)
        finals = self._finals_within(first, last)
        if finals:
            self._extend_across(decided, first, last, finals)
        else:
            if self.names_requests:   # pass logs: the free blocks after each step is scheduled
                free = self.kv.num_free
                run.free_blocks = [decided.free_blocks] + [free - group.blocks_for_steps(first + 1, count)
                                                           for count in range(1, steps)]
            self.kv.take(group.blocks_for_steps(first + 1, steps - 1), group.private_blocks)
            group.step = last
            # The reference samples KV usage at every pass end; the run is sampled at its end only,
            # after members that leave there freed their blocks. Nothing else allocates or frees on
            # this worker before the last step (the horizon), so usage at the end of the pass
            # before the last is known now: every block taken, less the last step's when that
            # step is scheduled only then (sync; async commits it one pass earlier).
            run.kv_peak = self.kv.num_used - (0 if self.async_scheduling else group.blocks_needed(last))
            decided.num_tokens = group.active * steps
        run.per_pass = decided.group_size - decided.group_warm

    def _extend_across(self, decided: SchedulerOutput, first: int, last: int, finals: list[int]) -> None:
        """`extend` for a run past the last steps `finals` of some members (see the module doc).

        The passes up to each finish become a result of their own (`PassRun.early`), reported
        at that pass end with the KV usage the engine has then; `decided` keeps the engine's
        view of the whole run and reports only its passes after the last of them. KV usage is
        sampled at a pass end after that pass's finished requests are freed: sync, with the
        blocks taken through that step; async, through the step after.
        """
        group = self.group
        kv = self.kv
        pool = group.private_blocks
        async_on = self.async_scheduling
        start_ns = self._run_start
        run = decided.run
        durations, uniform_ns = run.durations, run.gap_ns
        ends = None if durations is None else list(accumulate(durations))
        taken = first            # blocks are taken through this step
        peak = 0                 # the sample at the end of the step before a segment's last
        segment_first = first
        segment_start_ns = start_ns
        early = run.early = []
        # Pass logs: the free blocks after each step is scheduled, counted step by step between
        # the finishes' frees, as the engine interleaves them.
        free_blocks = [decided.free_blocks] if self.names_requests else None

        def take_through(step: int) -> None:
            nonlocal taken
            if step <= taken:
                return
            if free_blocks is not None:
                free = kv.num_free
                for one in range(taken + 1, step + 1):
                    free -= group.blocks_for_steps(one, 1)
                    free_blocks.append(free)
            need = group.blocks_for_steps(taken + 1, step - taken)
            if need:   # a short stretch between finishes often needs no new block
                kv.take(need, pool)
            taken = step

        def segment(scheduled: SchedulerOutput, final: int) -> PassRun:
            """The run of steps segment_first..final: the members active in them."""
            steps = final - segment_first + 1
            scheduled.group_size = group.active
            scheduled.group_warm = group.warm_active
            scheduled.num_tokens = group.active * steps
            part = PassRun(steps, None if durations is None else
                           durations[segment_first - first:final - first + 1], uniform_ns)
            part.per_pass = group.active - group.warm_active
            return part

        for final in finals:
            take_through(final if async_on else final - 1)
            if final > first:
                peak = kv.num_used
            scheduled = SchedulerOutput()
            scheduled.group_step = segment_first
            scheduled.members = decided.members
            part = segment(scheduled, final)
            take_through(final)
            for member in group.retire_at.pop(final):
                group._deactivate(member)
            if async_on:
                take_through(final + 1)   # committed before `final`'s outputs come back
            end_ns = start_ns + (ends[final - first] if ends is not None else (final - first + 1) * uniform_ns)
            # Its index counts from the run's first pass; the worker adds the run's.
            result = PassResult(scheduled, segment_first - first, segment_start_ns)
            result.run = part
            result.aggregate = part.per_pass
            result.finished = self._leave_early(final, end_ns)
            result.end_ns = end_ns
            part.kv_peak = peak
            part.opens = not early
            result.kv_used = kv.num_used
            early.append(result)
            segment_first = final + 1
            segment_start_ns = end_ns
        # The run's first pass is reported early: so are its preemptions and free blocks.
        early[0].scheduled.preempted, decided.preempted = decided.preempted, []
        early[0].scheduled.free_blocks = decided.free_blocks
        tail = segment(decided, last)
        run.durations = tail.durations
        run.opens = False
        take_through(last if async_on else last - 1)
        run.kv_peak = kv.num_used   # the sample at the end of the step before the last
        run.early_steps = segment_first - first
        take_through(last)
        group.step = last
        if free_blocks is not None:
            for result in early:
                offset = result.index   # its first step, counted from the run's first
                result.run.free_blocks = free_blocks[offset:offset + result.run.steps]
            run.free_blocks = free_blocks[run.early_steps:]

    def _leave_early(self, step: int, end_ns: int) -> list[Request]:
        """Members whose last token comes from run step `step` (ending at `end_ns`) leave, as
        `update_from_output` would have them leave at that pass end: finished, their full
        blocks keyed and their blocks freed, in request order. Not `_leave_at`: that also marks
        the step's outputs processed (`done_step`), which they are only when the run ends,
        and leaves a joiner's last token to its delivery, which a run makes in bulk."""
        group = self.group
        leaving = group.depart_at.pop(step)
        for member in leaving:
            member.last_token_ns = end_ns
            group.settle(member, step, step)
            del group.members[member.seq]
            member.status = FINISHED
        leaving.sort(key=lambda r: r.seq)
        kv = self.kv
        for member in leaving:
            kv.cache_full_blocks(member, member.num_computed)
            if not member.hold_kv:
                kv.free(member)
        return leaving
