"""SGLang's scheduler (sglang 0.5.9 `managers/scheduler.py`, `schedule_policy.py`, `schedule_batch.py`).

A pass is either a prefill (extend) pass or a decode pass, prefill first: while the
waiting queue can admit something (and the batch is not marked full), the engine
prefills; otherwise every running request decodes one token. Admission keeps a
conservative budget: free + evictable KV tokens, minus the decode tokens the running
requests may still need (remaining output, clipped at 4096, times `new_token_ratio`),
must exceed a new request's whole remaining prompt plus its clipped max new tokens.
When a decode pass cannot get its tokens even after evicting the cache, requests are
retracted (fewest generated tokens first, ties to the longest prompt) to the back of
the waiting queue. docs/modeling/sglang.md has every rule with its upstream function.
"""

from __future__ import annotations

from servesim.engine.kv.cache import ceil_div
from servesim.engine.passes import PassEntry, PassResult, SchedulerOutput
from servesim.engine.request import Request
from servesim.engine.scheduler_core import SchedulerCore

CLIP_MAX_NEW_TOKENS = 4096        # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
RETRACT_DECODE_STEPS = 20         # SGLANG_RETRACT_DECODE_STEPS
LPM_FALLBACK_QUEUE = 128          # lpm falls back to fcfs above this many waiting requests
PREFILL_RECV_WEIGHT = 1000        # SGLANG_SCHEDULER_RECV_SKIPPER_WEIGHT_DEFAULT (decode and idle: 1)


class SglangScheduler(SchedulerCore):
    def __init__(
        self,
        kv,
        max_running_requests: int,
        chunked_prefill_size: int | None,
        max_prefill_tokens: int,
        schedule_policy: str,
        enable_mixed_chunk: bool,
        init_new_token_ratio: float,
        min_new_token_ratio: float,
        new_token_ratio_decay: float,
        max_model_len: int,
        overlap: bool,
        num_reserved_decode_tokens: int = 512,
        recv_interval: int = 1,
    ) -> None:
        super().__init__(kv, max_model_len, overlap)
        self.recv_interval = recv_interval
        self.recv_counter = 0
        self.reads_every_call = recv_interval <= 1
        self.max_running_requests = max_running_requests
        self.chunked_prefill_size = chunked_prefill_size
        self.max_prefill_tokens = max_prefill_tokens
        self.schedule_policy = schedule_policy
        self.enable_mixed_chunk = enable_mixed_chunk
        self.init_ratio = init_new_token_ratio
        self.min_ratio = min_new_token_ratio
        self.decay = new_token_ratio_decay
        self.new_token_ratio = init_new_token_ratio
        self.chunked: Request | None = None    # the one request whose prompt is mid-way
        self.batch_is_full = False             # sticky until a running request leaves
        self.waiting = list(self.waiting)      # SGLang's waiting queue is re-sorted by policy
        self.retractions = 0
        self.num_reserved_decode_tokens = num_reserved_decode_tokens
        # A P/D decode server's request slots: the running limit, plus twice as many for
        # requests whose KV is on its way or has arrived, when that limit is at most 32.
        self.decode_slots = max_running_requests * (3 if max_running_requests <= 32 else 1)

    def reads_arrivals(self, last_launched: SchedulerOutput | None, skipped: int) -> bool:
        """SGLang's `SchedulerRecvSkipper` (`--scheduler-recv-interval`): each loop iteration adds
        the weight of the batch launched last (a decode batch 1, one with prefill
        PREFILL_RECV_WEIGHT) and reads new requests only once the sum reaches the interval,
        which starts it again from 0. The `skipped` iterations inside a run launched decode
        batches (1 each), so they move the sum round modulo the interval."""
        interval = self.recv_interval
        if interval <= 1:
            return True
        counter = (self.recv_counter + skipped) % interval
        if last_launched is not None and not all(e.is_decode for e in last_launched.entries):
            counter += PREFILL_RECV_WEIGHT
        else:
            counter += 1
        if counter >= interval:
            self.recv_counter = 0
            return True
        self.recv_counter = counter
        return False

    def idle_reads(self) -> None:
        # With no batch each iteration adds 1 and takes microseconds: the read comes at once.
        self.recv_counter = 0

    def has_unfinished(self) -> bool:
        return super().has_unfinished() or self.chunked is not None

    # ------------------------------------------------------------------ schedule

    def schedule(self) -> SchedulerOutput:
        self._take_transferred(self.max_running_requests)
        if not self.running and self.chunked is None and not self.waiting:
            self.new_token_ratio = self.init_ratio   # idle: the ratio resets
        out = self._prefill_pass()
        if out is None:
            out = self._decode_pass()
        self._update_after_schedule(out)
        return out

    def _decoding(self) -> list[Request]:
        """Running requests that take a decode token this pass."""
        if not self.async_scheduling:
            return list(self.running)
        return [r for r in self.running if not (r.placeholders > 0 and self._last_token_in_flight(r))]

    def _reserved_decode_tokens(self) -> float:
        return sum(min(max(r.max_tokens - r.num_output, 0), CLIP_MAX_NEW_TOKENS) for r in self.running) \
            * self.new_token_ratio

    def _order(self) -> list[Request]:
        if self.schedule_policy == "lpm" and len(self.waiting) <= LPM_FALLBACK_QUEUE and self.kv.enable_caching:
            # Longest prefix match first (a stable sort keeps arrival order among equals).
            return sorted(self.waiting, key=lambda r: -len(self.kv.lookup(r)))
        return list(self.waiting)

    def _prefill_pass(self) -> SchedulerOutput | None:
        kv = self.kv
        if (self.batch_is_full or not self.waiting) and self.chunked is None:
            return None
        decoders = self._decoding() if self.enable_mixed_chunk else []
        mixed = len(decoders)
        rem_input = self.max_prefill_tokens - mixed
        rem_chunk = None if self.chunked_prefill_size is None else self.chunked_prefill_size - mixed
        avail = kv.num_free * kv.block_size   # tokens: free pages, cached ones evictable
        total_offset = mixed + self._reserved_decode_tokens()
        current_offset = mixed
        out = SchedulerOutput()
        page = kv.block_size

        chunked = self.chunked
        if chunked is not None:
            remaining = chunked.num_tokens - chunked.num_computed
            # The reserved decode budget is fractional (× new_token_ratio); SGLang truncates the
            # remaining total to whole tokens before sizing the chunk.
            chunk = min(rem_chunk if rem_chunk is not None else remaining, int(avail - total_offset))
            if chunk <= 0:
                chunk = rem_chunk if rem_chunk is not None else remaining   # a chunk always progresses
            chunk = min(chunk, remaining)
            if not kv.allocate(chunked, chunk):
                chunk = 0
            if chunk > 0:
                out.entries.append(PassEntry(chunked, chunk, chunked.num_computed, "running"))
                last = chunk == remaining
                reserve = min(chunked.max_tokens - chunked.num_output, CLIP_MAX_NEW_TOKENS) if last else 0
                total_offset += chunk + reserve
                current_offset += chunk
                rem_input -= chunk
                if rem_chunk is not None:
                    rem_chunk -= chunk
                if last:
                    self.chunked = None
                    self.running.append(chunked)

        admitted: list[Request] = []
        new_chunked = None
        if self.chunked is None:
            for request in self._order():
                if rem_chunk is not None and rem_chunk <= 0 or rem_input <= 0:
                    break
                # Admitted requests join the running list at once (_start_running): it
                # already counts them against the request slots.
                if len(self.running) >= self.max_running_requests:
                    self.batch_is_full = True
                    break
                hits = kv.lookup(request)
                loaded = kv.lookup_host(request, len(hits)) if kv.host is not None else 0
                hit_tokens = (len(hits) + loaded) * page
                extend = request.num_tokens - hit_tokens
                # Host-tier hits need device pages too, though not compute.
                total = extend + loaded * page + min(max(request.max_tokens - request.num_output, 0),
                                                     CLIP_MAX_NEW_TOKENS)
                # Its matched prefix gets locked: blocks sitting evictable stop counting as free.
                locked = sum(1 for b in hits if kv.is_evictable(b)) * page
                if total >= avail - total_offset - locked:
                    self.batch_is_full = True
                    break
                if extend >= rem_input and admitted:
                    break
                if rem_chunk is None or extend <= rem_chunk:
                    take = extend
                else:
                    take = rem_chunk // page * page
                    if take <= 0:
                        break
                if not kv.admit(request, hits, take, has_running=False, loaded=loaded):
                    self.batch_is_full = True
                    break
                admitted.append(request)
                self.waiting.remove(request)
                reserve = min(request.max_tokens - request.num_output, CLIP_MAX_NEW_TOKENS) if take == extend else 0
                total_offset += take + reserve
                current_offset += take
                rem_input -= take
                if rem_chunk is not None:
                    rem_chunk -= take
                self._start_running(request, out, take, hit_tokens, loaded)
                if take < extend:
                    new_chunked = request
                    break
                if avail - total_offset <= 0 or avail - current_offset <= 0:
                    self.batch_is_full = True
                    break
        if not out.entries:
            return None
        if new_chunked is not None:
            self.running.remove(new_chunked)
            self.chunked = new_chunked
        self._add_decodes(out, decoders, self._decode_tokens(decoders))
        return out

    def _add_decodes(self, out: SchedulerOutput, decoders: list[Request], tokens: list[int]) -> None:
        kv = self.kv
        entries = out.entries
        if kv.allocate_each(decoders, tokens):
            entries.extend([PassEntry(request, count, request.num_computed, "running")
                            for request, count in zip(decoders, tokens)])
            return
        for request, count in zip(decoders, tokens):   # some do not fit: those are skipped
            if kv.allocate(request, count):
                entries.append(PassEntry(request, count, request.num_computed, "running"))

    def _decode_pass(self) -> SchedulerOutput:
        kv = self.kv
        out = SchedulerOutput()
        decoders = self._decoding()
        tokens = self._decode_tokens(decoders)
        needs = self._blocks_needed(decoders, tokens)
        need = sum(needs)
        retracted = False
        while need > kv.num_free and len(decoders) > 1:
            victim = min(decoders, key=lambda r: (r.num_output, -r.prompt_len, -r.seq))
            index = decoders.index(victim)
            del decoders[index], tokens[index]
            need -= needs.pop(index)   # the others' needs do not depend on it
            self._retract(victim)
            out.preempted.append(victim)
            retracted = True
        if retracted:
            remaining = self.running
            self.new_token_ratio = min(1.0, (sum(r.num_output for r in remaining) + RETRACT_DECODE_STEPS
                                             * len(remaining)) / (sum(r.max_tokens for r in remaining) + 1))
        elif decoders:
            self.new_token_ratio = max(self.new_token_ratio - self.decay, self.min_ratio)
        self._add_decodes(out, decoders, tokens)
        return out

    def _blocks_needed(self, decoders: list[Request], tokens: list[int]) -> list[int]:
        block = self.kv.block_size
        return [max(-(-(r.num_computed + count) // block) - len(r.blocks), 0) for r, count in zip(decoders, tokens)]

    def _retract(self, request: Request) -> None:
        """Free the request's KV but keep its prompt cached; it goes to the back of the queue."""
        self.running.remove(request)
        # Decoded tokens are not kept in the radix tree: only prompt blocks stay cached.
        self._stop_running(request, keep_blocks=request.prompt_len // self.kv.block_size)
        self.waiting.append(request)
        self.batch_is_full = False
        self.retractions += 1

    def admits_transfer(self, request: Request) -> bool:
        """A P/D decode server takes pages for an incoming KV only with decode room kept back.

        SGLang's decode-side preallocation: the pages a transfer may take are the free ones
        minus a reserve of decode tokens per request already admitted (running, received, or
        with its KV on the way), and never so many that one running request could not grow to
        its whole (clipped) output with every other running request retracted. The request
        needs its prompt's pages plus its own reserve, and a request slot.
        """
        held = len(self.running) + len(self.transferred) + len(self.incoming)
        if held >= self.decode_slots:
            return False
        page = self.kv.block_size
        reserve = self.num_reserved_decode_tokens
        retractable = sum(r.prompt_len + r.num_output for r in self.running)
        single = (max(r.prompt_len + min(r.max_tokens, CLIP_MAX_NEW_TOKENS) for r in self.running) - retractable
                  if self.running else 0)
        allocatable = self.kv.num_free * page - max(reserve * held, single)
        required = ceil_div(request.prompt_len, page) * page + reserve
        whole = request.prompt_len + min(request.max_tokens, CLIP_MAX_NEW_TOKENS) - retractable
        return max(required, whole) <= allocatable

    def release_held(self, request: Request) -> None:
        # The prefill server's KV pool shrinks back like a running batch that lost a request:
        # admission is tried again.
        super().release_held(request)
        self.batch_is_full = False

    def num_running(self) -> int:
        return len(self.running) + (self.chunked is not None)   # the chunked prompt runs too

    def held(self) -> list[Request]:
        return [*super().held(), *([self.chunked] if self.chunked is not None else [])]

    def abort(self, request: Request) -> bool:
        """SGLang's `Scheduler.abort_request`: a waiting request leaves the queue; a running one
        (or the one mid-way through a chunked prompt) is finished and its KV released
        (`release_kv_cache`; the radix cache keeps its prefix, evictable). A request leaving
        the running batch clears the batch-is-full mark, as a finish does."""
        if request is self.chunked:
            self.chunked = None
            self.kv.free(request)
        elif not super().abort(request):
            return False
        self.batch_is_full = False
        return True

    def update_from_output(self, done: PassResult) -> None:
        before = len(self.running)
        super().update_from_output(done)
        if len(self.running) < before:
            self.batch_is_full = False
