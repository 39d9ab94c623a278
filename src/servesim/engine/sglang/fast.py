"""SGLang's fast engine: the reference scheduler (engine/sglang/scheduler.py) with runs of identical
decode passes fast-forwarded (engine/decode_runs.py), runs that may start at a retraction
(engine/sglang/retract_runs.py), and a decode pass and output processing that visit each
running request once each (the reference's rules on the same counts, held to it by
tests/test_sglang_fast_decode.py and tests/test_fast_engine.py)."""

from __future__ import annotations

from operator import attrgetter

from servesim.engine.decode_runs import DecodeRuns
from servesim.engine.passes import PassEntry, PassResult, SchedulerOutput
from servesim.engine.request import Status
from servesim.engine.sglang.behind import can_extend_with_behind, extend_with_behind, settle_run_end, without
from servesim.engine.sglang.fused_decode import fused_applies, fused_decode_pass, quiet_sums
from servesim.engine.sglang.retract_runs import next_prefill_fails, report_first_pass_apart
from servesim.engine.sglang.scheduler import CLIP_MAX_NEW_TOKENS, RETRACT_DECODE_STEPS, SglangScheduler


_num_output = attrgetter("num_output")
_max_tokens = attrgetter("max_tokens")


def _victim_index(decoders: list) -> int:
    """Where the reference's victim, `min(decoders, key=lambda r: (r.num_output, -r.prompt_len,
    -r.seq))`, is in `decoders`: the fewest outputs found in C (`map`, `list.index`), and only
    the requests tied on them compared on the rest (the longest prompt, then the latest
    admission; the first of full ties, as `min` keeps it)."""
    outputs = list(map(_num_output, decoders))
    fewest = min(outputs)
    index = tie = outputs.index(fewest)
    best = decoders[index]
    for _ in range(outputs.count(fewest) - 1):
        tie = outputs.index(fewest, tie + 1)
        other = decoders[tie]
        if (other.prompt_len, other.seq) > (best.prompt_len, best.seq):
            best, index = other, tie
    return index


class FastSglangScheduler(DecodeRuns, SglangScheduler):
    """SGLang with runs of identical decode passes fast-forwarded (engine/decode_runs.py)."""

    _committed: SchedulerOutput | None = None   # a decode pass whose entries are already committed
    _behind: SchedulerOutput | None = None      # the pass behind a run, committed with it (behind.py)
    # Does the next call's prefill try fail and mark the batch full (engine/sglang/retract_runs.py)?
    # Settled once per run asked for (None: not yet), the mark set as the run is made.
    _full_after_run: bool | None = None
    # A pass behind a run whose decoders each hold exactly their computed tokens' pages, two tokens
    # or more inside the context limit (behind.py).
    _behind_exact: SchedulerOutput | None = None
    _quiet_sums = None   # the run check's sums made by the last fused decode pass (fused_decode.py)
    _settled: tuple | None = None   # a run whose outputs extend_with_behind applied, and what is left

    def quiet_steps(self, decided: SchedulerOutput, limit: int, now: int) -> int:
        self._full_after_run = None
        exact, self._behind_exact = self._behind_exact, None
        if decided is exact:
            # A run from it needs, for its second pass and the one committed behind it, two pages
            # for each of its requests (one-token pages): with fewer free, `_quiet_pages` finds
            # no run (either count), so its loop over the batch is skipped. Row 2s retracts
            # when the pages run out, and the pass behind each of those runs finds none.
            if 2 * len(decided.entries) > self.kv.num_free:
                return 0
        return super().quiet_steps(decided, limit, now)

    def _quiet_pages(self, entries, limit: int, now: int) -> int:
        sums = quiet_sums(self, entries, limit)
        if sums is None:
            return super()._quiet_pages(entries, limit, now)
        return self._quiet_fit(entries, *sums, now)

    def _admission_quiet(self) -> bool:
        # A prefill is tried only while something waits and the batch is not marked full, and
        # that mark stays until a running request leaves (the run's last pass at the earliest);
        # else the next call's try must fail at its first candidate.
        if self.chunked is not None:
            return False
        if not self.waiting or self.batch_is_full:
            return True
        if self._full_after_run is None:
            self._full_after_run = self.speculation is None and next_prefill_fails(
                self, 0 if self.async_scheduling else 1, CLIP_MAX_NEW_TOKENS)
        return self._full_after_run

    def _runs_past_preemption(self, decided: SchedulerOutput) -> bool:
        # Retracted requests come back only through a prefill try, which the run has settled.
        return self._admission_quiet()

    def extend(self, decided: SchedulerOutput, steps: int, durations, uniform_ns: int = 0) -> None:
        apart = decided.preempted or self._full_after_run
        # A run from a pass that retracted or whose next call tries a prefill: its first pass is
        # reported apart, at its end the KV in use as the engine has it then (with overlap the
        # next pass's blocks taken too).
        kv_used = (self.kv.num_used + (self._run_pages(decided.entries, 1) if self.async_scheduling else 0)
                   if apart else 0)
        if can_extend_with_behind(self, decided, steps):
            # With overlap the next call decides the pass behind the run at once: made here
            # (engine/sglang/behind.py), handed over by `schedule`.
            extend_with_behind(self, decided, steps, durations, uniform_ns)
        else:
            super().extend(decided, steps, durations, uniform_ns)
        if apart:
            report_first_pass_apart(decided, self._run_start, kv_used)

    def schedule(self) -> SchedulerOutput:
        behind = self._behind
        if behind is None:
            return super().schedule()
        self._behind = None   # the call behind a run: its pass was committed with the run
        self._last_decided = behind
        return behind

    def _no_pass_behind(self) -> None:
        # Nothing reaches the worker between a run's start and the call behind it; if something
        # did, the pass committed with the run would be wrong.
        if self._behind is not None:
            raise RuntimeError("the scheduler was changed between a run and the pass committed behind it "
                               "(this is a servesim bug)")

    def add_request(self, request) -> None:
        self._no_pass_behind()
        super().add_request(request)

    def add_transferred(self, request) -> None:
        self._no_pass_behind()
        super().add_transferred(request)

    def expect_transfer(self, request) -> None:
        self._no_pass_behind()
        super().expect_transfer(request)

    def release_held(self, request) -> None:
        self._no_pass_behind()
        super().release_held(request)

    def abort(self, request) -> bool:
        self._no_pass_behind()
        return super().abort(request)

    def _reserved_decode_tokens(self) -> float:
        # The reference's sum written out (no generator, min or max per request): every prefill
        # pass sums it over the running batch. The same integers, times the ratio once.
        clip = CLIP_MAX_NEW_TOKENS
        total = 0
        for request in self.running:
            left = request.max_tokens - request.num_output
            if left > 0:
                total += left if left < clip else clip
        return total * self.new_token_ratio

    def _request_slots(self) -> int:
        return self.max_running_requests

    def _decode_pass(self) -> SchedulerOutput:
        """The reference's decode pass with its counts done once: one loop over the batch
        counts every request's new blocks, and the cache takes them without counting again
        (`_commit_decodes`: the allocation and the entries in one loop); a pass that retracts does so
        on those counts (`_retract_for`).
        A pass that drafts or reaches the context limit takes the reference's path; nothing is
        changed before it does."""
        if self.speculation is not None:
            return super()._decode_pass()
        if fused_applies(self):   # no retraction, one visit a request (engine/sglang/fused_decode.py)
            return fused_decode_pass(self)
        kv = self.kv
        size = kv.block_size
        max_len = self.max_model_len
        overlap = self.async_scheduling
        decoders = []
        needs = []
        need = 0
        for request in self.running:
            computed = request.num_computed + 1
            # `_decoding`, written out: with overlap, a request whose last token is in flight sits out.
            if overlap and request.placeholders > 0 and \
                    computed + 1 - request.placeholders >= request.prompt_len + request.max_tokens:
                continue
            decoders.append(request)
            if computed > max_len:
                return super()._decode_pass()
            blocks = -(-computed // size) - len(request.blocks)
            if blocks > 0:
                need += blocks
            needs.append(blocks)
        out = SchedulerOutput()
        if need > kv.num_free:
            need = self._retract_for(out, decoders, needs, need)
            if need > kv.num_free:   # a lone request does not fit: the reference's allocation
                self._add_decodes(out, decoders, [1] * len(decoders))
                return out
        elif decoders:
            self.new_token_ratio = max(self.new_token_ratio - self.decay, self.min_ratio)
        if decoders:
            self._commit_decodes(out, decoders, needs, need)
        return out

    def _retract_for(self, out: SchedulerOutput, decoders: list, needs: list, need: int) -> int:
        """The reference's retraction (`SglangScheduler._decode_pass`) on the counts the fast pass
        made: victims leave `decoders` and `needs` until `need` blocks fit or one request is left,
        then `new_token_ratio` is reset from the remaining batch. Returns the blocks still needed."""
        kv = self.kv
        while need > kv.num_free and len(decoders) > 1:
            index = _victim_index(decoders)
            victim = decoders[index]
            del decoders[index]
            blocks = needs.pop(index)
            if blocks > 0:
                need -= blocks   # the others' needs do not depend on it
            self._retract(victim)
            out.preempted.append(victim)
        if out.preempted:
            remaining = self.running
            # The reference's sums, each one `map` in C.
            self.new_token_ratio = min(1.0, (sum(map(_num_output, remaining)) + RETRACT_DECODE_STEPS
                                             * len(remaining)) / (sum(map(_max_tokens, remaining)) + 1))
        elif decoders:
            self.new_token_ratio = max(self.new_token_ratio - self.decay, self.min_ratio)
        return need

    def _commit_decodes(self, out: SchedulerOutput, decoders: list, needs: list, need: int) -> None:
        """`KvCache.allocate_needs` (one token each, `need` blocks in all) and the pass's entries
        with `_update_after_schedule`'s bookkeeping, in one loop over the batch instead of three.
        Each request's blocks and cache mark are settled before its counters move, as when the
        allocation ran first: no request's allocation reads another's counters."""
        kv = self.kv
        new_entry = object.__new__
        pool: list[int] = []
        kv.take(need, pool)
        position = 0
        caching = kv.enable_caching
        size = kv.block_size
        entries = out.entries
        overlap = self.async_scheduling
        for request, blocks in zip(decoders, needs):
            if blocks == 1:   # one-token pages: one block a decode, no slice
                request.blocks.append(pool[position])
                position += 1
            elif blocks > 0:
                request.blocks.extend(pool[position:position + blocks])
                position += blocks
            before = request.num_computed
            computed = before + 1
            known = request.prompt_len + request.num_output
            if caching:
                full = (computed if computed < known else known) // size
                if full > request.num_cached_blocks:
                    if request.num_cached_blocks < request.keys.shared_blocks:
                        kv.cache_full_blocks(request, computed if computed < known else known)
                    else:   # past the shareable prefix: what `cache_full_blocks` does, without the call
                        request.num_cached_blocks = full
            # `PassEntry(request, 1, before, "running")`, its fields stored here: no __init__ call.
            entry = new_entry(PassEntry)
            entry.request = request
            entry.tokens = 1
            entry.computed_before = before
            entry.kind = "running"
            known += request.placeholders
            request.num_computed = computed
            request.in_flight += 1
            request.is_prefill_chunk = chunk = computed < known
            entry.is_decode = before >= request.prompt_len
            if chunk:
                entry.samples = False
                entry.drafts = 0
            else:
                entry.samples = True
                entry.drafts = drafts = computed - known
                if overlap:
                    request.placeholders += 1 + drafts
            entries.append(entry)
        out.num_tokens = len(decoders)
        self._committed = out

    def _update_after_schedule(self, out: SchedulerOutput) -> None:
        if out is self._committed:   # done as the decode pass made its entries
            self._committed = None
            return
        super()._update_after_schedule(out)

    def update_from_output(self, done: PassResult) -> None:
        """`SglangScheduler.update_from_output` with no drafts to verify (no speculative decoding):
        the same steps per entry, in the same order, with the lookups out of the loop and the
        block caching past the shareable prefix done as `allocate_needs` does it. This runs once
        per scheduler call over the whole batch."""
        self._no_pass_behind()
        if self.speculation is not None:
            return super().update_from_output(done)
        settled = self._settled
        if settled is not None:
            if settled[0] is not done.scheduled:
                # The run's outputs are already applied: its end must be the next output, or its
                # finishes and cache marks would be lost without a trace.
                raise RuntimeError("a settled SGLang run ended out of order (this is a servesim bug)")
            self._settled = None
            return settle_run_end(self, done, settled[1])
        before = len(self.running)
        finished = done.finished
        deliver = done.delivered.append
        stopped_running: list = []
        run = done.run is not None
        overlap = self.async_scheduling
        produced = 1 if overlap or not run else done.run.steps
        kv = self.kv
        size = kv.block_size
        caching = kv.enable_caching
        max_len = self.max_model_len
        end_ns = done.end_ns
        # A plain pass's tokens to requests whose previous token came as it started (one pass
        # before) are delivered in aggregate, as a run's are (`PassResult.aggregate`, `gap_ns`),
        # unless every request must be named: the same gaps and delivery count, no collector
        # visit each.
        in_bulk = not run and not self.names_requests
        start_ns = done.start_ns
        warmup_below = self.warmup_below
        measured = 0
        done_status, running_status = Status.FINISHED, Status.RUNNING
        for entry in done.scheduled.entries:
            request = entry.request
            tokens = entry.tokens
            request.in_flight -= tokens
            stale = request.stale
            if stale > 0:
                request.stale = stale - tokens
            status = request.status
            if status == done_status or not entry.samples:
                continue
            request.num_output = output = request.num_output + produced
            if run:
                request.last_token_ns = end_ns
            elif in_bulk and request.last_token_ns == start_ns and request.first_token_ns is not None:
                request.last_token_ns = end_ns   # what the collector does for a request it is given
                if request.request_id >= warmup_below:
                    measured += 1
            else:
                deliver(request)
            if overlap:
                if stale <= 0:
                    request.placeholders -= produced
                if status == running_status and caching:
                    known = request.num_computed - request.placeholders
                    full = known // size
                    if full > request.num_cached_blocks:
                        if request.num_cached_blocks < request.keys.shared_blocks:
                            kv.cache_full_blocks(request, known)
                        else:
                            request.num_cached_blocks = full
            if output >= request.max_tokens or request.prompt_len + output >= max_len:
                request.status = done_status
                if not request.hold_kv:
                    kv.free(request)
                finished.append(request)
                if status == running_status:
                    stopped_running.append(request)
                else:
                    self.waiting.remove(request)
        if measured:
            done.aggregate = measured
            done.gap_ns = end_ns - start_ns
        if stopped_running:
            self.running = without(self.running, stopped_running)
        if len(self.running) < before:
            self.batch_is_full = False

    def _advance_run(self, extra: int) -> None:
        if self._full_after_run:   # the run's second call tried to admit and marked the batch full
            self.batch_is_full = True
            self._full_after_run = False
        # One decay per decode pass, in the engine's float arithmetic.
        ratio, decay, floor = self.new_token_ratio, self.decay, self.min_ratio
        for _ in range(extra):
            if ratio == floor:
                break
            ratio = max(ratio - decay, floor)
        self.new_token_ratio = ratio
