"""vLLM v1's scheduler (vLLM 0.32 `v1/core/sched/scheduler.py` and `async_scheduler.py`).

One token budget per pass, handed first to running requests in admission
order, then to waiting requests in FCFS order. Allocation failure for a
running request preempts the most recently admitted one. Every rule, with the
upstream function it follows, is in docs/modeling/vllm.md; this module is the
straightforward per-request form of those rules (the reference).
"""

from __future__ import annotations

from servesim.engine.kv.cache import KvCache
from servesim.engine.passes import PassEntry, SchedulerOutput
from servesim.engine.kv.reference_cache import ReferenceKvCache
from servesim.engine.request import RUNNING, Request
from servesim.engine.scheduler_core import SchedulerCore


class VllmScheduler(SchedulerCore):
    def __init__(
        self,
        kv: KvCache | ReferenceKvCache,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        max_model_len: int,
        enable_chunked_prefill: bool,
        long_prefill_token_threshold: int,
        async_scheduling: bool,
    ) -> None:
        super().__init__(kv, max_model_len, async_scheduling)
        self.max_num_seqs = max_num_seqs
        # The most running requests a max_num_seqs check saw: a lower limit above it decides every
        # check alike (engine/vllm/shared_runs.py).
        self.seqs_peak = 0
        self.max_num_batched_tokens = max_num_batched_tokens
        self.enable_chunked_prefill = enable_chunked_prefill
        self.long_prefill_token_threshold = long_prefill_token_threshold

    @property
    def lookahead(self) -> int:
        """KV slots reserved past the scheduled tokens for a drafter that writes its own KV there
        (EAGLE, MTP: num_speculative_tokens; n-gram drafts need none)."""
        speculation = self.speculation
        return speculation.num_draft_tokens if speculation is not None and speculation.method != "ngram" else 0

    def _seqs_full(self) -> bool:
        """Running requests at max_num_seqs (the count seen is kept in `seqs_peak`)."""
        running = self._num_running()
        if running > self.seqs_peak:
            self.seqs_peak = running
        return running >= self.max_num_seqs

    # ------------------------------------------------------------------ schedule

    def schedule(self) -> SchedulerOutput:
        kv = self.kv
        budget = self.max_num_batched_tokens
        # The long-prefill cap exists so one prompt cannot starve others: with a
        # single request present there is nobody to starve.
        threshold = (
            self.long_prefill_token_threshold
            if len(self.running) + len(self.waiting) > 1
            else 0
        )
        out = SchedulerOutput()
        entries = out.entries
        running = self.running

        index = 0
        while index < len(running) and budget > 0:
            request = running[index]
            if request.placeholders > 0 and self._last_token_in_flight(request):
                index += 1
                continue
            num_new = request.num_tokens + request.placeholders - request.num_computed
            num_new += self._drafts(request, num_new)
            if 0 < threshold < num_new:
                num_new = threshold
            num_new = min(num_new, budget, self.max_model_len - request.num_computed - 1)
            if num_new <= 0:
                index += 1
                continue
            while True:
                if kv.allocate(request, num_new, self.lookahead):
                    allocated = True
                    break
                victim = running.pop()
                self._preempt(victim)
                out.preempted.append(victim)
                if victim is request:
                    allocated = False
                    break
            if not allocated:
                break
            entries.append(PassEntry(request, num_new, request.num_computed, "running"))
            budget -= num_new
            index += 1

        if not out.preempted:
            self._admit_waiting(out, budget, threshold)

        self._update_after_schedule(out)
        return out

    def _admit_waiting(self, out: SchedulerOutput, budget: int, threshold: int) -> Request | None:
        """Admit waiting requests in queue order; returns the request that did not fit in memory, if any."""
        kv = self.kv
        waiting = self.waiting
        running = self.running
        skipped: list[Request] = []
        blocked = None
        # Received KV caches first (vLLM drains requests that hold KV blocks before the others).
        transferred = self.transferred
        while budget > 0 and transferred:
            if self._seqs_full():
                break
            request = transferred[0]
            num_new = request.num_tokens - request.num_computed
            if 0 < threshold < num_new:
                num_new = threshold
            if num_new > budget:   # (not min(): a builtin call parses its arguments)
                num_new = budget
            if not kv.allocate(request, num_new, self.lookahead):
                break
            transferred.popleft()
            running.append(request)
            request.seq = self.admissions
            self.admissions += 1
            request.status = RUNNING
            out.entries.append(PassEntry(request, num_new, request.num_computed, "new"))
            budget -= num_new
        while budget > 0 and waiting:
            if self._seqs_full():
                break
            request = waiting[0]
            if request.stale:
                # Async: output of a pass that ran before the preemption is still in
                # flight; resuming now could recompute a position it later delivers.
                skipped.append(waiting.popleft())
                continue
            hits = kv.lookup(request)
            if hits:   # (admit records it too; a hit may decide the break below before it)
                kv.hit = True
            loaded = kv.lookup_host(request, len(hits)) if kv.host is not None else 0
            hit_tokens = (len(hits) + loaded) * kv.block_size
            num_new = request.num_tokens - hit_tokens
            if 0 < threshold < num_new:
                num_new = threshold
            if not self.enable_chunked_prefill and num_new > budget:
                break
            if num_new > budget:   # (not min(): a builtin call parses its arguments)
                num_new = budget
            if not kv.admit(request, hits, num_new, has_running=self._num_running() > 0, loaded=loaded,
                            lookahead=self.lookahead):
                blocked = request
                break
            waiting.popleft()
            self._start_running(request, out, num_new, hit_tokens, loaded)
            budget -= num_new
        # Skipped requests go back to the front, in their original order.
        waiting.extendleft(reversed(skipped))
        return blocked

    def _preempt(self, request: Request) -> None:
        self._stop_running(request)
        self.waiting.appendleft(request)
