"""TensorRT-LLM's generation requests held as aggregates: a pass costs O(1) for all of them.

TensorRT-LLM's schedulers (engine/trtllm/scheduler.py) take every generation request first,
in running order, when they all fit: the micro-batch scheduler's `max_batch_size` and
`max_num_tokens` are then counts (one token each), and under GUARANTEED_NO_EVICT their blocks
were reserved at admission, so the capacity scheduler needs only the count of new blocks. So
a request that generates one token per pass joins a decode group (engine/vllm/decode_group.py,
the structure vLLM's fast engine uses), which keeps the count, the total context and the
blocks each step needs as running totals. Per pass the scheduler visits only the explicit
requests: context requests (prompts mid-way), the ones just admitted, and generation
requests joining the group. A member's counters and blocks are written back when it leaves
(its last token) or when the group is dissolved.

The group is dissolved, and the pass scheduled by the per-request path (engine/trtllm/fast.py,
which falls back to the reference), when the generation requests do not all fit, when a
member reaches its context limit, and before a pass that could start a fast-forwarded run
(nothing can be admitted: engine/decode_runs.py runs over explicit requests). It is formed only
from the third pass in a row that could admit (`FORM_AFTER`): forming costs a join per request
and dissolving a write-back, which a lone arrival between two runs would not repay. It is not used
under MAX_UTILIZATION (pauses pick by admission order), speculative decoding, batch waiting,
pass logs or token times (they list every request), or on a worker that receives KV transfers.

Finishes keep the reference's order: the generation requests of a pass first (members, by
admission), then its context and new requests, in the pass's order.
"""

from __future__ import annotations

from servesim.engine.decode_runs import DecodeRuns
from servesim.engine.passes import PassEntry, PassResult, SchedulerOutput
from servesim.engine.request import Request, Status
from servesim.engine.scheduler_core import SchedulerCore
from servesim.engine.trtllm.fast import FusedTrtllmPasses
from servesim.engine.trtllm.scheduler import TrtllmScheduler
from servesim.engine.vllm.decode_group import DecodeGroup


# Passes in a row that could admit before the generation requests are grouped.
FORM_AFTER = 3


class GroupedTrtllmPasses(FusedTrtllmPasses):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.group = DecodeGroup(self.kv.block_size)
        self.pending: list[SchedulerOutput] = []   # scheduled passes whose outputs are not processed yet
        self.group_passes = 0
        self.admitting_passes = 0   # passes in a row that could admit (the waiting head not refused)

    # ------------------------------------------------------------------ queues

    def exclude_warmup(self, first_measured: int) -> None:
        self.group.warmup_below = first_measured

    def has_unfinished(self) -> bool:
        return super().has_unfinished() or bool(self.group.members)

    def _num_running(self) -> int:
        return len(self.running) + len(self.group.members)

    def held(self) -> list[Request]:
        return [*super().held(), *self.group.members.values()]

    def abort(self, request: Request) -> bool:
        # No pass is in flight at an abort (engine/worker.py's apply_aborts).
        if self.group.members.get(request.seq) is request:
            self._dissolve()
        return super().abort(request)

    def _reserved_blocks(self) -> int:
        if self._margin_key == self._reserve_state() or not self.group.members:
            return super()._reserved_blocks()
        # Summed again: the explicit requests' terms, then each member's with the blocks it holds
        # so far (its own, and one per block_size tokens computed through the group's last step).
        size = self.kv.block_size
        limit = self.max_model_len
        step = self.group.step
        total = TrtllmScheduler._reserved_blocks(self)
        for member in self.group.members.values():
            computed = member.group_computed + min(step, member.group_final) - member.group_first + 1
            held = max(len(member.blocks), -(-min(computed, limit) // size))
            need = self._need_blocks(member) - held
            if need > 0:
                total += need
        self._keep_reserve(total)
        return total

    # ------------------------------------------------------------------ schedule

    def _groups(self) -> bool:
        """May this pass hold generation requests in the group (see the module doc)?"""
        return (self.policy == "GUARANTEED_NO_EVICT" and self.speculation is None and not self.batch_waiting
                and not self.names_requests and not self._transfers_seen
                and not any(p.run is not None for p in self.pending))

    def schedule(self) -> SchedulerOutput:
        group = self.group
        step = group.step + 1
        group.retire_before(step)
        out = None
        if self._groups() and not self._admission_quiet():
            self.admitting_passes += 1
            # Forming the group costs a join per request and dissolving it a write-back: worth it
            # only in a spell of admissions, not for the lone arrival between two runs.
            if group.members or self.admitting_passes >= FORM_AFTER:
                out = self._schedule_grouped(step)
        else:
            self.admitting_passes = 0
        if out is None:
            self._dissolve()
            out = super().schedule()
        else:
            self.group_passes += 1
        if out:
            self.pending.append(out)
        return out

    def _schedule_grouped(self, step: int) -> SchedulerOutput | None:
        """One pass with the generation requests in aggregate form, or None (nothing changed)."""
        kv = self.kv
        group = self.group
        size = kv.block_size
        max_len = self.max_model_len
        joiners: list[Request] = []
        needs: list[int] = []
        total = 0
        contexts: list[Request] = []
        for request in self.running:
            placeholders = request.placeholders
            computed = request.num_computed
            need = request.prompt_len + request.num_output + placeholders - computed
            if need <= 0:
                continue
            if placeholders > 0 and computed + 2 - placeholders >= request.prompt_len + request.max_tokens:
                continue   # its last token is in flight (overlap)
            if need != 1:
                contexts.append(request)
                continue
            if computed < request.prompt_len or request.prompt_len + request.max_tokens > max_len:
                # Its prompt's last token (a prefill chunk to the step-time model, not a decode),
                # or it would stop at the context limit, which the group does not track.
                return None
            blocks = -(-(computed + 1) // size) - len(request.blocks)
            if blocks > 0:
                total += blocks
            joiners.append(request)
            needs.append(blocks)
        count = group.active + len(joiners)
        budget = self.max_num_tokens
        member_blocks = group.blocks_needed(step) if group.active else 0
        if count > self.max_batch_size or count > budget or member_blocks + total > kv.num_free:
            return None   # the micro-batch or capacity scheduler cuts the generation requests
        out = SchedulerOutput()
        carried = self._margin_key == self._reserve_state()
        if member_blocks:
            kv.take(member_blocks, group.private_blocks)
        if joiners:
            kv.allocate_needs(joiners, [1] * len(joiners), needs, total)
            for request in joiners:
                group.join(request, step)
            self.running = [r for r in self.running if r.group_first < 0]
        budget = self._schedule_contexts(contexts, out, budget - count, count)
        if carried:
            self._margin_key = self._reserve_state()   # every block taken was counted in the reserve
        if group.active:
            group.step = step
            out.group_step = step
            out.group_size = group.active
            out.group_warm = group.warm_active
            out.group_context = group.context_at(step)
        reserved = self._admit_new(out, budget)
        if reserved is not None:
            self._keep_reserve(reserved)
        self._update_after_schedule(out)
        out.num_tokens += out.group_size
        return out

    # ------------------------------------------------------------------ dissolving

    def _in_flight_group_pass(self) -> tuple[int, SchedulerOutput | None]:
        """The group step whose outputs are still in flight (0 if none), and its pass."""
        group = self.group
        if group.step <= group.done_step:
            return 0, None
        step = group.step
        return step, next((p for p in self.pending if p.group_step == step), None)

    def _dissolve(self) -> None:
        """Turn every member back into an explicit running request (exact counters and blocks);
        a member's token in the pass in flight becomes an explicit entry of that pass, listed
        first, as the reference lists generation requests."""
        group = self.group
        if not group.members:
            group.reset()
            return
        in_flight_step, in_flight_pass = self._in_flight_group_pass()
        assert not in_flight_step or in_flight_pass is not None, "a group step in flight has no pass"
        detached: list[PassEntry] = []
        for member in sorted(group.members.values(), key=lambda r: r.seq):
            first = member.group_first
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
                entry.is_decode = computed_in_flight >= member.prompt_len
                detached.append(entry)
            frontier = member.num_computed - (member.placeholders if self.async_scheduling else 0)
            self.kv.cache_full_blocks(member, frontier)
            member.is_prefill_chunk = False
        if in_flight_pass is not None:
            in_flight_pass.entries[:0] = detached
            in_flight_pass.group_step = 0
            in_flight_pass.group_size = in_flight_pass.group_warm = 0
        assert not group.private_blocks, "decode group lost track of its blocks"
        self.running = sorted(self.running + list(group.members.values()), key=lambda r: r.seq)
        group.reset()

    # ------------------------------------------------------------------ outputs

    def update_from_output(self, result: PassResult) -> None:
        done = result.scheduled
        if self.pending and self.pending[0] is done:
            self.pending.pop(0)
        else:
            self.pending.remove(done)
        step = done.group_step
        if not step:
            super().update_from_output(result)
            return
        carried = self._margin_key == self._reserve_state()
        reserved = self.kv.num_free - self._margin if carried else None
        group = self.group
        joiners = group.joined_at.pop(step, [])
        result.delivered.extend(joiners)
        regular = done.group_size - len(joiners)
        if regular:
            warm = done.group_warm
            if warm:
                warm -= sum(1 for r in joiners if group.is_warm(r))
            result.aggregate = regular - warm
            result.gap_ns = result.end_ns - group.done_end_ns
        # Members whose last token this was leave first, in admission order, as the reference's
        # generation requests lead its pass.
        leaving = []
        for member in group.depart_at.pop(step, ()):
            if member.group_first != step:   # a joiner's delivery goes through `delivered`
                member.last_token_ns = result.end_ns
            group.settle(member, step, step)
            del group.members[member.seq]
            member.status = Status.FINISHED
            leaving.append(member)
        group.done_step = step
        group.done_end_ns = result.end_ns
        leaving.sort(key=lambda r: r.seq)
        kv = self.kv
        for member in leaving:
            if reserved is not None:
                reserved -= self._finished_term(member)
            kv.cache_full_blocks(member, member.num_computed)
            if not member.hold_kv:
                kv.free(member)
            result.finished.append(member)
        before = len(result.finished)
        SchedulerCore.update_from_output(self, result)   # the explicit entries, as the reference
        if reserved is not None:
            for request in result.finished[before:]:
                reserved -= self._finished_term(request)
            self._keep_reserve(reserved)


class FastTrtllmScheduler(DecodeRuns, GroupedTrtllmPasses):
    """TensorRT-LLM with its generation requests in aggregate form (engine/trtllm/group.py) and
    runs of identical decode passes fast-forwarded (engine/decode_runs.py)."""

    def exclude_warmup(self, first_measured: int) -> None:
        DecodeRuns.exclude_warmup(self, first_measured)
        GroupedTrtllmPasses.exclude_warmup(self, first_measured)

    def quiet_steps(self, decided: SchedulerOutput, limit: int, now: int) -> int:
        if self.group.members:
            return 0   # a run is made of explicit requests' passes
        return super().quiet_steps(decided, limit, now)

    def extend(self, decided: SchedulerOutput, steps: int, durations, uniform_ns: int = 0) -> None:
        # A run's blocks go to running requests, each within the reserve it counted: the margin stays.
        carried = self._margin_key == self._reserve_state()
        super().extend(decided, steps, durations, uniform_ns)
        if carried:
            self._margin_key = self._reserve_state()

    def _request_slots(self) -> int:
        return self.max_batch_size

    def _admission_quiet(self) -> bool:
        running = self._num_running()
        if not self.waiting or running >= self.max_batch_size or self.max_num_tokens <= running:
            return True   # a full batch stays full; the token budget left after the decodes is the same
        head = self.waiting[0]
        if self.policy != "GUARANTEED_NO_EVICT" or head.stale or self.batch_waiting:
            return False   # (a held context is released after a count of passes)
        # A decode pass takes blocks that every running request's reserve counted already, so
        # free blocks less the reserve stay put: a head refused now stays refused. (Asked now,
        # not when `decided` was committed: with overlap, finishes were processed since.)
        return self._need_blocks(head) > self.kv.num_free - self._reserved_blocks()
