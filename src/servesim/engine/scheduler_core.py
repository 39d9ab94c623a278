"""What every backend's scheduler shares: request queues, the pass bookkeeping, and outputs.

A backend's scheduling policy (vLLM, SGLang, TensorRT-LLM) decides which requests run
in a pass and with how many tokens; everything before and after that decision is here:
the queues, advancing computed tokens once a pass is committed (with async/overlap
placeholders), and processing a pass's outputs (delivering tokens, finishing requests,
freeing their KV blocks).
"""

from __future__ import annotations

from collections import deque

from servesim.engine.kv.cache import KvCache
from servesim.engine.passes import PassEntry, PassResult, SchedulerOutput
from servesim.engine.kv.reference_cache import ReferenceKvCache
from servesim.engine.request import FINISHED, PREEMPTED, RUNNING, WAITING, Request
from servesim.engine.speculative import Speculation


class SchedulerCore:
    # Set by the simulation: a finish changes nothing outside the engine before the next
    # arrival (open-loop client, aggregated serving). vLLM's fast engine then runs past it.
    finishes_are_quiet = False
    reads_every_call = True   # every scheduler call reads the arrivals (see reads_arrivals)
    # Async scheduling: a run's follow-up pass may be committed at the run's second-to-last
    # pass end, as the engine commits it, rather than when the run starts (engine/worker.py).
    commits_follow_late = False
    # Set by the worker: its call behind a run comes as the run starts (engine/sglang/behind.py).
    behind_at_run_start = False
    # Lets one committed pass stand for a run of identical passes (engine/events.py's FastForward).
    fast_forwards = False
    names_requests = False    # outputs name every request of every pass (keep_pass_details)

    def __init__(self, kv: KvCache | ReferenceKvCache, max_model_len: int, async_scheduling: bool) -> None:
        self.kv = kv
        self.max_model_len = max_model_len
        self.async_scheduling = async_scheduling   # vLLM async scheduling, SGLang/TRT-LLM overlap
        self.running: list[Request] = []
        self.waiting: deque[Request] = deque()
        # Requests whose KV cache arrived from a prefill worker (disaggregated serving): they hold
        # their blocks and are admitted first, at the next schedule() after the transfer.
        self.transferred: deque[Request] = deque()
        self.incoming: dict[int, Request] = {}   # blocks reserved, KV transfer still in flight
        self.admissions = 0     # running order is admission order: each admission gets the next seq
        # Disaggregated decode worker: handoffs are queued for it that it has no blocks for yet
        # (set by cluster/disaggregation.py each time it tries to reserve).
        self.transfers_waiting = False
        self.speculation: Speculation | None = None   # speculative decoding, when configured

    # ------------------------------------------------------------------ queues

    def exclude_warmup(self, first_measured: int) -> None:
        """Requests with smaller ids are warm-up: a scheduler that delivers tokens in bulk counts them apart."""

    def add_request(self, request: Request) -> None:
        self.waiting.append(request)

    def abort(self, request: Request) -> bool:
        """Drop a waiting or running request and free its blocks; False if it is not here.

        vLLM's `Scheduler.finish_requests(ids, RequestStatus.FINISHED_ABORTED)`: the request
        leaves the waiting queue or the running list and `_free_request` frees its blocks
        (full ones stay in the prefix cache, evictable). Called with no pass in flight.
        """
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        else:
            return False
        self.kv.free(request)
        return True

    def expect_transfer(self, request: Request) -> None:
        """Blocks are reserved for the request's KV, which is on its way."""
        self.incoming[request.request_id] = request

    def add_transferred(self, request: Request) -> None:
        self.incoming.pop(request.request_id, None)
        self.transferred.append(request)

    def reads_arrivals(self, last_launched: SchedulerOutput | None, skipped: int) -> bool:
        """Whether a scheduler call that follows `last_launched` (the pass the engine launched
        last; `skipped` calls inside a fast-forwarded run before it) reads the requests that
        have arrived. vLLM and TensorRT-LLM read at every call."""
        return True

    def idle_reads(self) -> None:
        """The engine runs nothing: its loop spins and reads arrivals at once."""

    def keep_pass_details(self) -> None:
        """A pass log or token times are asked for: a scheduler holding requests as aggregates
        names them in its outputs (`SchedulerOutput.members`), and a fast-forwarded run keeps
        the free blocks of each of its passes (`PassRun.free_blocks`)."""
        self.names_requests = True

    def has_unfinished(self) -> bool:
        return bool(self.running) or bool(self.waiting) or bool(self.transferred)

    def _num_running(self) -> int:
        return len(self.running)

    def num_running(self) -> int:
        """Requests in the running batch (a snapshot's `running`)."""
        return self._num_running()

    def held(self) -> list[Request]:
        """Every request this scheduler holds (to find one to abort: not a hot path)."""
        return [*self.running, *self.waiting, *self.transferred]

    def _start_running(self, request: Request, out: SchedulerOutput, tokens: int, computed_before: int,
                       loaded: int = 0) -> None:
        """Admit a request into the running list with its first chunk of this pass.

        `computed_before` counts prefix hits; `loaded` of them are blocks copied back from
        the host tier, which this pass waits for.
        """
        self.running.append(request)
        request.seq = self.admissions
        self.admissions += 1
        kind = "new" if request.status == WAITING else "resumed"
        request.status = RUNNING
        request.num_computed = computed_before
        loaded_tokens = loaded * self.kv.block_size
        if request.cached_tokens is None:
            request.cached_tokens = computed_before - loaded_tokens
            request.host_cached_tokens = loaded_tokens
        if loaded:
            out.load_ns += loaded * self.kv.host.load_ns_per_block
        out.entries.append(PassEntry(request, tokens, computed_before, kind))

    def admits_transfer(self, request: Request) -> bool:
        """May this decode worker take blocks for an incoming KV transfer now (beyond fitting)?"""
        return True

    def release_held(self, request: Request) -> None:
        """A finished prefill's KV, held for its transfer to a decode worker, is sent: free it."""
        self.kv.free(request)

    def _take_transferred(self, limit: int) -> None:
        """Received KV (disaggregated decode): the request joins the running batch as a decode.

        SGLang's decode server and TensorRT-LLM's generation server add a request whose
        KV has arrived straight to the running batch, up to the request-slot limit.
        """
        while self.transferred and len(self.running) < limit:
            request = self.transferred.popleft()
            request.status = RUNNING
            request.seq = self.admissions
            self.admissions += 1
            self.running.append(request)

    def _stop_running(self, request: Request, keep_blocks: int | None = None) -> None:
        """Preempted, retracted or paused: its KV freed, it restarts from scratch (the caller queues it).

        `keep_blocks`: only that many leading blocks stay in the prefix cache (SGLang keeps a
        retracted request's prompt, not its decoded tokens).
        """
        self.kv.free(request, finished=False, keep_blocks=keep_blocks)
        request.status = PREEMPTED
        request.num_computed = 0
        request.stale = request.in_flight   # outputs of passes still in flight arrive stale
        request.placeholders = 0
        request.drafting = False
        request.num_preemptions += 1

    def _last_token_in_flight(self, request: Request) -> bool:
        """Async/overlap: the pass in flight already produces the request's last token."""
        return (request.placeholders > 0
                and request.num_computed + 2 - request.placeholders >= request.prompt_len + request.max_tokens)

    def _drafts(self, request: Request, remaining: int) -> int:
        """Speculative tokens a running request verifies this pass after its `remaining` known one.

        The drafter proposes after a pass that sampled the request (vLLM drops the drafts at
        preemption), and drafts only follow the newest token: a request still catching up on
        known tokens computes those first.
        """
        if self.speculation is not None and request.drafting and remaining == 1:
            # Positions stay inside the context limit (vLLM clips the drafts there).
            room = self.max_model_len - request.num_computed - 2
            return max(0, min(self.speculation.num_draft_tokens, room))
        return 0

    def _decode_tokens(self, decoders: list[Request]) -> list[int]:
        """Tokens each decoding request computes this pass: its newest, plus drafts under speculative decoding."""
        if self.speculation is None:
            return [1] * len(decoders)
        return [1 + self._drafts(request, 1) for request in decoders]

    def schedule(self) -> SchedulerOutput:
        raise NotImplementedError

    def _update_after_schedule(self, out: SchedulerOutput) -> None:
        if not out.entries:
            out.num_tokens = 0
            return
        tokens = 0
        speculative = self.speculation is not None
        for entry in out.entries:
            request = entry.request
            known = request.prompt_len + request.num_output + request.placeholders
            request.num_computed += entry.tokens
            request.in_flight += entry.tokens
            tokens += entry.tokens
            request.is_prefill_chunk = request.num_computed < known
            entry.samples = not request.is_prefill_chunk
            entry.is_decode = entry.kind == "running" and entry.computed_before >= request.prompt_len
            if entry.samples:
                # Positions past the known tokens are drafts being verified.
                entry.drafts = request.num_computed - known
                if speculative:
                    request.drafting = True
                if self.async_scheduling:
                    request.placeholders += 1 + entry.drafts
        out.num_tokens = tokens

    # ------------------------------------------------------------------ outputs

    def update_from_output(self, done: PassResult) -> None:
        """Process a finished pass: deliver sampled tokens, finish requests, free their blocks.

        Fills `done.delivered` (requests that received a token) and `done.finished`.
        """
        finished = done.finished
        delivered = done.delivered
        stopped_running: set[int] = set()
        # A run of decode passes (engine/decode_runs.py): each request gets a token per pass,
        # delivered in aggregate (`done.aggregate`, set by the run); with overlap all but the
        # last were credited when the run started.
        run = done.run is not None
        run_tokens = 1 if self.async_scheduling or not run else done.run.steps
        block_size = self.kv.block_size
        max_model_len = self.max_model_len
        for entry in done.scheduled.entries:
            request = entry.request
            request.in_flight -= entry.tokens
            stale = request.stale > 0
            if stale:
                request.stale -= entry.tokens
            if request.status == FINISHED or not entry.samples:
                continue
            was_running = request.status == RUNNING
            produced = run_tokens
            if entry.drafts:
                request.spec_steps += 1
                accepted = self.speculation.accepted(request.request_id, request.spec_steps, entry.drafts)
                produced += accepted
                if not stale:
                    # Rejected drafts' positions are computed again (vLLM rolls the count back).
                    rejected = entry.drafts - accepted
                    if request.num_computed > 0:
                        request.num_computed -= rejected
                    if request.placeholders > 0:
                        request.placeholders -= rejected
                produced = min(produced, request.max_tokens - request.num_output,
                               self.max_model_len - request.num_tokens)
            request.num_output += produced
            if run:
                request.last_token_ns = done.end_ns
            else:
                delivered.append(request)
            if self.async_scheduling:
                if not stale:
                    request.placeholders -= produced
                if was_running:
                    # Async scheduling caches a block once its last token is known (the call
                    # is skipped, as it would return at once, while no block is newly full).
                    known = request.num_computed - request.placeholders
                    if known // block_size > request.num_cached_blocks:
                        self.kv.cache_full_blocks(request, known)
            if request.num_output >= request.max_tokens or request.prompt_len + request.num_output >= max_model_len:
                request.status = FINISHED
                if not request.hold_kv:
                    self.kv.free(request)
                finished.append(request)
                if was_running:
                    stopped_running.add(request.request_id)
                else:
                    self.waiting.remove(request)
        if stopped_running:
            self.running = [r for r in self.running if r.request_id not in stopped_running]
