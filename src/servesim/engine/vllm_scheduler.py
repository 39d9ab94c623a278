"""vLLM v1's scheduler (vLLM 0.32 `v1/core/sched/scheduler.py` and `async_scheduler.py`).

One token budget per pass, handed first to running requests in admission
order, then to waiting requests in FCFS order. Allocation failure for a
running request preempts the most recently admitted one. Every rule, with the
upstream function it follows, is in docs/modeling/vllm.md; this module is the
straightforward per-request form of those rules (the reference).
"""

from __future__ import annotations

from collections import deque

from servesim.engine.kv_cache import KvCache
from servesim.engine.reference_kv_cache import ReferenceKvCache
from servesim.engine.passes import PassEntry, ScheduledPass
from servesim.engine.request import Request, Status


class VllmScheduler:
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
        self.kv = kv
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.enable_chunked_prefill = enable_chunked_prefill
        self.long_prefill_token_threshold = long_prefill_token_threshold
        self.async_scheduling = async_scheduling
        self.running: list[Request] = []
        self.waiting: deque[Request] = deque()
        # Requests whose KV cache arrived from a prefill worker (disaggregated serving): they hold
        # their blocks and are admitted first, at the next schedule() after the transfer.
        self.transferred: deque[Request] = deque()
        self.admissions = 0     # running order is admission order: each admission gets the next seq

    # ------------------------------------------------------------------ queues

    def add_request(self, request: Request) -> None:
        self.waiting.append(request)

    def add_transferred(self, request: Request) -> None:
        self.transferred.append(request)

    def has_unfinished(self) -> bool:
        return bool(self.running) or bool(self.waiting) or bool(self.transferred)

    def _num_running(self) -> int:
        return len(self.running)

    # ------------------------------------------------------------------ schedule

    def schedule(self) -> ScheduledPass:
        kv = self.kv
        budget = self.max_num_batched_tokens
        # The long-prefill cap exists so one prompt cannot starve others: with a
        # single request present there is nobody to starve.
        threshold = (
            self.long_prefill_token_threshold
            if len(self.running) + len(self.waiting) > 1
            else 0
        )
        out = ScheduledPass()
        entries = out.entries
        running = self.running

        index = 0
        while index < len(running) and budget > 0:
            request = running[index]
            if (
                request.placeholders > 0
                and request.num_computed + 2 - request.placeholders
                >= request.prompt_len + request.max_tokens
            ):
                # Async: the pass in flight already produces its last token.
                index += 1
                continue
            num_new = request.num_tokens + request.placeholders - request.num_computed
            if 0 < threshold < num_new:
                num_new = threshold
            num_new = min(num_new, budget, self.max_model_len - request.num_computed - 1)
            if num_new <= 0:
                index += 1
                continue
            while True:
                if kv.allocate(request, num_new):
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

    def _admit_waiting(self, out: ScheduledPass, budget: int, threshold: int) -> Request | None:
        """Admit waiting requests in queue order; returns the request that did not fit in memory, if any."""
        kv = self.kv
        waiting = self.waiting
        running = self.running
        skipped: list[Request] = []
        blocked = None
        # Received KV caches first (vLLM drains requests that hold KV blocks before the others).
        transferred = self.transferred
        while budget > 0 and transferred:
            if self._num_running() >= self.max_num_seqs:
                break
            request = transferred[0]
            num_new = request.num_tokens - request.num_computed
            if 0 < threshold < num_new:
                num_new = threshold
            num_new = min(num_new, budget)
            if not kv.allocate(request, num_new):
                break
            transferred.popleft()
            running.append(request)
            request.seq = self.admissions
            self.admissions += 1
            request.status = Status.RUNNING
            out.entries.append(PassEntry(request, num_new, request.num_computed, "new"))
            budget -= num_new
        while budget > 0 and waiting:
            if self._num_running() >= self.max_num_seqs:
                break
            request = waiting[0]
            if request.stale:
                # Async: output of a pass that ran before the preemption is still in
                # flight; resuming now could recompute a position it later delivers.
                skipped.append(waiting.popleft())
                continue
            hits = kv.lookup(request)
            hit_tokens = len(hits) * kv.block_size
            num_new = request.num_tokens - hit_tokens
            if 0 < threshold < num_new:
                num_new = threshold
            if not self.enable_chunked_prefill and num_new > budget:
                break
            num_new = min(num_new, budget)
            if not kv.admit(request, hits, num_new, has_running=self._num_running() > 0):
                blocked = request
                break
            waiting.popleft()
            running.append(request)
            request.seq = self.admissions
            self.admissions += 1
            kind = "new" if request.status == Status.WAITING else "resumed"
            request.status = Status.RUNNING
            request.num_computed = hit_tokens
            if request.cached_tokens is None:
                request.cached_tokens = hit_tokens
            out.entries.append(PassEntry(request, num_new, hit_tokens, kind))
            budget -= num_new
        # Skipped requests go back to the front, in their original order.
        waiting.extendleft(reversed(skipped))
        return blocked

    def _preempt(self, request: Request) -> None:
        self.kv.free(request, finished=False)
        request.status = Status.PREEMPTED
        request.num_computed = 0
        request.stale = request.in_flight
        request.placeholders = 0
        request.num_preemptions += 1
        self.waiting.appendleft(request)

    def _update_after_schedule(self, out: ScheduledPass) -> None:
        tokens = 0
        for entry in out.entries:
            request = entry.request
            request.num_computed += entry.tokens
            request.in_flight += entry.tokens
            tokens += entry.tokens
            request.is_prefill_chunk = request.num_computed < request.num_tokens + request.placeholders
            entry.samples = not request.is_prefill_chunk
            entry.is_decode = entry.kind == "running" and entry.computed_before >= request.prompt_len
            if self.async_scheduling and entry.samples:
                request.placeholders += 1
        out.num_tokens = tokens

    # ------------------------------------------------------------------ outputs

    def update_from_output(self, done: ScheduledPass) -> None:
        """Process a finished pass: deliver sampled tokens, finish requests, free their blocks.

        Fills `done.delivered` (requests that received a token) and `done.finished`.
        """
        finished = done.finished
        delivered = done.delivered
        stopped_running: set[int] = set()
        for entry in done.entries:
            request = entry.request
            request.in_flight -= entry.tokens
            stale = request.stale > 0
            if stale:
                request.stale -= entry.tokens
            if request.status == Status.FINISHED or not entry.samples:
                continue
            was_running = request.status == Status.RUNNING
            request.num_output += 1
            delivered.append(request)
            if self.async_scheduling:
                if not stale:
                    request.placeholders -= 1
                if was_running:
                    # Async scheduling caches a block once its last token is known.
                    self.kv.cache_full_blocks(request, request.num_computed - request.placeholders)
            if request.num_output >= request.max_tokens or request.num_tokens >= self.max_model_len:
                request.status = Status.FINISHED
                if not request.hold_kv:
                    self.kv.free(request)
                finished.append(request)
                if was_running:
                    stopped_running.add(request.request_id)
                else:
                    self.waiting.remove(request)
        if stopped_running:
            self.running = [r for r in self.running if r.request_id not in stopped_running]
