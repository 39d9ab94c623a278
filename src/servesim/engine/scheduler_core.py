"""What every backend's scheduler shares: request queues, the pass bookkeeping, and outputs.

A backend's scheduling policy (vLLM, SGLang, TensorRT-LLM) decides which requests run
in a pass and with how many tokens; everything before and after that decision is here:
the queues, advancing computed tokens once a pass is committed (with async/overlap
placeholders), and processing a pass's outputs (delivering tokens, finishing requests,
freeing their KV blocks).
"""

from __future__ import annotations

from collections import deque

from servesim.engine.kv_cache import KvCache
from servesim.engine.passes import PassEntry, ScheduledPass
from servesim.engine.reference_kv_cache import ReferenceKvCache
from servesim.engine.request import Request, Status


class SchedulerCore:
    def __init__(self, kv: KvCache | ReferenceKvCache, max_model_len: int, async_scheduling: bool) -> None:
        self.kv = kv
        self.max_model_len = max_model_len
        self.async_scheduling = async_scheduling   # vLLM async scheduling, SGLang/TRT-LLM overlap
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

    def _start_running(self, request: Request, out: ScheduledPass, tokens: int, computed_before: int) -> None:
        """Admit a request into the running list with its first chunk of this pass."""
        self.running.append(request)
        request.seq = self.admissions
        self.admissions += 1
        kind = "new" if request.status == Status.WAITING else "resumed"
        request.status = Status.RUNNING
        request.num_computed = computed_before
        if request.cached_tokens is None:
            request.cached_tokens = computed_before
        out.entries.append(PassEntry(request, tokens, computed_before, kind))

    def _last_token_in_flight(self, request: Request) -> bool:
        """Async/overlap: the pass in flight already produces the request's last token."""
        return (request.placeholders > 0
                and request.num_computed + 2 - request.placeholders >= request.prompt_len + request.max_tokens)

    def schedule(self) -> ScheduledPass:
        raise NotImplementedError

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
