"""TensorRT-LLM's scheduler (PyTorch executor: capacity scheduler + micro-batch scheduler).

Follows the 2025 v1.1-1.2 line of `tensorrt_llm/_torch/pyexecutor/scheduler.py` and the C++
`batch_manager/capacityScheduler.cpp`, `microBatchScheduler.cpp` (docs/modeling/trtllm.md):

- capacity: requests already in progress always continue. `GUARANTEED_NO_EVICT` (the
  default) admits a new request, in arrival order, only if the KV blocks of its whole
  sequence (prompt + max new tokens; a prefix hit does not lower it) fit in the free
  blocks left after every running request's remaining need to completion; the first
  that does not fit stops admission. `MAX_UTILIZATION` admits while the next step
  fits and, on a shortage, pauses the most recently started request (its KV freed,
  its generated tokens recomputed with the prompt later).
- micro-batch: at most `max_batch_size` requests and `max_num_tokens` tokens per
  iteration; generation requests take their token first, then context requests in
  order. Without chunked context a prompt that does not fit the budget left stops
  the iteration's context admission; with it (first-come-first-served chunking) a
  chunk takes the budget left, rounded down to whole KV blocks unless it is the last.
"""

from __future__ import annotations

from servesim.engine.kv.cache import ceil_div
from servesim.engine.passes import PassEntry, SchedulerOutput
from servesim.engine.request import Request, Status
from servesim.engine.scheduler_core import SchedulerCore


class TrtllmScheduler(SchedulerCore):
    def __init__(
        self,
        kv,
        max_batch_size: int,
        max_num_tokens: int,
        capacity_scheduler_policy: str,
        enable_chunked_context: bool,
        max_model_len: int,
        overlap: bool,
        batch_wait_timeout_iters: int = 0,
        batch_wait_max_tokens_ratio: float = 0.0,
    ) -> None:
        super().__init__(kv, max_model_len, overlap)
        self.max_batch_size = max_batch_size
        self.max_num_tokens = max_num_tokens
        self.policy = capacity_scheduler_policy
        self.enable_chunked_context = enable_chunked_context
        self.pauses = 0
        self.batch_wait_iters = batch_wait_timeout_iters
        self.batch_wait_tokens = batch_wait_max_tokens_ratio * max_num_tokens
        self.batch_waiting = batch_wait_timeout_iters > 0 or batch_wait_max_tokens_ratio > 0
        self.batch_waited = 0    # iterations context work has been held so far

    # ------------------------------------------------------------------ schedule

    def schedule(self) -> SchedulerOutput:
        kv = self.kv
        out = SchedulerOutput()
        budget = self.max_num_tokens
        self._take_transferred(self.max_batch_size)

        # In-progress requests: generation first, then contexts (prompts mid-way), in order.
        generating, contexts = [], []
        for request in self.running:
            need = request.num_tokens + request.placeholders - request.num_computed
            if need <= 0 or (request.placeholders > 0 and self._last_token_in_flight(request)):
                continue
            (generating if request.num_computed >= request.num_tokens - 1 + request.placeholders
             and need == 1 else contexts).append(request)

        if self.policy == "MAX_UTILIZATION":
            self._pause_for_next_step(generating + contexts, out)
            generating = [r for r in generating if r.status == Status.RUNNING]
            contexts = [r for r in contexts if r.status == Status.RUNNING]

        scheduled = 0
        wanted = self._decode_tokens(generating)
        if (generating and len(generating) <= self.max_batch_size and sum(wanted) <= budget
                and kv.allocate_each(generating, wanted)):
            # The usual pass: every generation request fits the budget, the batch and the free blocks.
            out.entries.extend([PassEntry(request, tokens, request.num_computed, "running")
                                for request, tokens in zip(generating, wanted)])
            budget -= sum(wanted)
            scheduled = len(generating)
            generating = []
        for request, want in zip(generating, wanted):
            if budget <= 0 or scheduled >= self.max_batch_size:
                break
            tokens = min(want, budget)
            if not kv.allocate(request, tokens):
                break
            out.entries.append(PassEntry(request, tokens, request.num_computed, "running"))
            budget -= tokens
            scheduled += 1
        if self.batch_waiting and scheduled and self._holds_contexts(contexts, budget, scheduled, out):
            self._update_after_schedule(out)
            return out
        budget = self._schedule_contexts(contexts, out, budget, scheduled)

        self._admit_new(out, budget)
        self._update_after_schedule(out)
        return out

    def _admit_new(self, out: SchedulerOutput, budget: int) -> int | None:
        """New requests, in arrival order (paused ones first: they were running), while the
        token budget, the batch and (GUARANTEED_NO_EVICT) the guaranteed blocks allow.
        Returns the reserve after them (None: not summed, nothing was waiting)."""
        kv = self.kv
        block = kv.block_size
        guaranteed = self.policy == "GUARANTEED_NO_EVICT"
        reserved = None if guaranteed else 0   # summed over the running requests only when needed
        while self.waiting and budget > 0 and self._num_running() < self.max_batch_size:
            request = self.waiting[0]
            if request.stale:
                break
            need_blocks = self._need_blocks(request)
            if reserved is None:
                reserved = self._reserved_blocks()
            if guaranteed and need_blocks > kv.num_free - reserved:
                break
            hits = kv.lookup(request)
            hit_tokens = len(hits) * block
            chunk = self._chunk(request.num_tokens - hit_tokens, budget, block)
            if chunk <= 0:
                break
            if not kv.admit(request, hits, chunk, has_running=self._num_running() > 0):
                break
            self.waiting.popleft()
            self._start_running(request, out, chunk, hit_tokens)
            budget -= chunk
            reserved += need_blocks - len(request.blocks)
        return reserved

    def _context_selection(self, contexts: list[Request], budget: int, scheduled: int) -> int:
        """The prompt tokens of the context requests this iteration would take: in-progress
        contexts, then waiting ones in order, within the budget and the batch (a dry run of the
        loops below; under GUARANTEED_NO_EVICT a chunk's blocks were reserved at admission)."""
        block = self.kv.block_size
        tokens = 0
        for request in contexts:
            if budget <= 0 or scheduled >= self.max_batch_size:
                return tokens
            chunk = self._chunk(request.num_tokens - request.num_computed, budget, block)
            if chunk <= 0:
                return tokens
            tokens += request.num_tokens
            budget -= chunk
            scheduled += 1
        reserved = self._reserved_blocks() if self.policy == "GUARANTEED_NO_EVICT" else None
        running = len(self.running)
        for request in self.waiting:
            if budget <= 0 or running >= self.max_batch_size or request.stale:
                break
            need = self._need_blocks(request)
            if reserved is not None and need > self.kv.num_free - reserved:
                break
            chunk = self._chunk(request.num_tokens - len(self.kv.lookup(request)) * block, budget, block)
            if chunk <= 0:
                break
            tokens += request.num_tokens
            budget -= chunk
            running += 1
            if reserved is not None:
                reserved += need
        return tokens

    def _schedule_contexts(self, contexts: list[Request], out: SchedulerOutput, budget: int,
                           scheduled: int) -> int:
        """Prompts mid-way, in order, each its chunk of what the budget and the batch leave;
        the first that does not fit (tokens, batch or blocks) ends the pass. The budget left."""
        kv = self.kv
        block = kv.block_size
        for request in contexts:
            if budget <= 0 or scheduled >= self.max_batch_size:
                break
            chunk = self._chunk(request.num_tokens - request.num_computed, budget, block)
            if chunk <= 0 or not kv.allocate(request, chunk):
                break
            out.entries.append(PassEntry(request, chunk, request.num_computed, "running"))
            budget -= chunk
            scheduled += 1
        return budget

    def _holds_contexts(self, contexts: list[Request], budget: int, scheduled: int, out: SchedulerOutput) -> bool:
        """PyExecutor._waiting_requests (TensorRT-LLM 1.1-1.2): with generation requests in the
        iteration, context requests wait until `batch_wait_timeout_iters` iterations have held
        them or their prompt tokens plus the generation tokens reach the ratio of
        max_num_tokens; each held iteration counts one, a release resets the count."""
        wanted = self._context_selection(contexts, budget, scheduled)
        if not wanted:
            return False
        generation = sum(entry.tokens for entry in out.entries)
        if self.batch_waited >= self.batch_wait_iters or wanted + generation >= self.batch_wait_tokens:
            self.batch_waited = 0
            return False
        self.batch_waited += 1
        return True

    def abort(self, request: Request) -> bool:
        """TensorRT-LLM's `Executor::cancelRequest`: the request is terminated at the executor
        loop's next iteration and the KV cache manager frees its blocks (reusable ones stay
        for block reuse); SchedulerCore.abort does that between passes (docs/modeling/abort.md)."""
        return super().abort(request)

    def _chunk(self, remaining: int, budget: int, block: int) -> int:
        if remaining <= budget:
            return remaining
        if not self.enable_chunked_context:
            return 0   # the whole prompt must fit this iteration's budget
        return budget // block * block

    def _need_blocks(self, request: Request) -> int:
        """Blocks of the request's whole sequence."""
        # Drafts verified with the last tokens take slots past the sequence's end.
        drafts = self.speculation.num_draft_tokens if self.speculation is not None else 0
        return ceil_div(min(request.prompt_len + request.max_tokens + drafts, self.max_model_len),
                        self.kv.block_size)

    def _reserved_blocks(self) -> int:
        """Blocks admitted requests (running, received, or with their KV on the way) will still
        need to complete: GUARANTEED_NO_EVICT's promise."""
        # `_need_blocks` written out: this runs over the whole batch after every admission, transfer
        # and free (the fast scheduler keeps it in between), so it makes no method call per
        # request (docs/performance.md, "Hot loops written out").
        drafts = self.speculation.num_draft_tokens if self.speculation is not None else 0
        limit = self.max_model_len
        size = self.kv.block_size
        total = 0
        for r in (*self.running, *self.transferred, *self.incoming.values()):
            need = -(-min(r.prompt_len + r.max_tokens + drafts, limit) // size) - len(r.blocks)
            if need > 0:
                total += need
        return total

    def admits_transfer(self, request: Request) -> bool:
        # The generation server's capacity scheduler admits a received request like any other:
        # under GUARANTEED_NO_EVICT only if its whole sequence is guaranteed.
        if self.policy != "GUARANTEED_NO_EVICT":
            return True
        return self._need_blocks(request) <= self.kv.num_free - self._reserved_blocks()

    def _pause_for_next_step(self, candidates: list[Request], out: SchedulerOutput) -> None:
        """MAX_UTILIZATION: pause the most recently started requests until the next step fits."""
        block = self.kv.block_size

        def need(r: Request) -> int:
            return max(ceil_div(r.num_computed + 1 + self._drafts(r, 1), block) - len(r.blocks), 0)

        while sum(need(r) for r in candidates if r.status == Status.RUNNING) > self.kv.num_free:
            victim = max((r for r in self.running), key=lambda r: r.seq)
            self.running.remove(victim)
            self._stop_running(victim)
            self.waiting.appendleft(victim)
            out.preempted.append(victim)
            self.pauses += 1
            if not self.running:
                break
