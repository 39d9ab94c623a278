"""TensorRT-LLM's fast scheduler: the reference's passes with their per-request work done once.

Same decisions as `TrtllmScheduler` (the reference, engine/trtllm/scheduler.py), less work:

- **One loop per decode pass.** When every in-progress request is a generation request
  asking for its one token (no prompt mid-way, no drafts, no batch waiting), the pass
  filters them, counts their new blocks and commits their entries in one loop over the
  batch, where the reference makes five (the filter, `allocate_each`'s count, the
  entries, `_update_after_schedule`, and MAX_UTILIZATION's pause check): the micro-batch
  scheduler then takes every one of them (`max_batch_size` and `max_num_tokens` are
  counts) and the capacity scheduler pauses nobody (their blocks are free). New requests
  follow as in the reference. Any other pass, or one that would pause, cut the batch or
  run short of blocks, takes the reference's path, with nothing changed before it.
- **GUARANTEED_NO_EVICT's reserve in closed form.** The reserve (blocks admitted requests
  still need to complete) is summed over the batch once and then carried as the margin
  free blocks − reserve: an allocation for a running request lowers both by the same
  count, an admission adds its need less what it took, and a finish takes out its own
  term, so the margin moves only where the scheduler itself moves it. It is summed again
  whenever something else may have moved it (a free or block-key insertion it did not
  account for, a transfer, an abort, a pause): the key it was kept under has changed.

engine/trtllm/group.py builds the fast scheduler on it: generation requests held as aggregates,
and runs of identical decode passes fast-forwarded (engine/decode_runs.py).

`tests/test_trtllm_fast.py` holds this scheduler to the reference on random workloads and
checks the carried reserve against a fresh sum at every use.
"""

from __future__ import annotations

from servesim.engine.passes import PassEntry, PassResult, SchedulerOutput
from servesim.engine.request import Request
from servesim.engine.trtllm.scheduler import TrtllmScheduler


class FusedTrtllmPasses(TrtllmScheduler):
    """The reference scheduler with its decode passes in one loop and its reserve carried."""

    _margin = 0                        # free blocks less the reserve, valid at `_margin_key`
    _margin_key: tuple | None = None
    _transfers_seen = False            # a P/D decode worker: its requests' blocks came by transfer
    fused_passes = 0
    reference_passes = 0

    # ------------------------------------------------------------------ the reserve

    def _reserve_state(self) -> tuple:
        kv = self.kv
        return (kv.epoch, kv.num_free, self.admissions, len(self.running), len(self.transferred),
                len(self.incoming))

    def _reserved_blocks(self) -> int:
        if self._margin_key == self._reserve_state():
            return self.kv.num_free - self._margin
        reserved = super()._reserved_blocks()
        self._keep_reserve(reserved)
        return reserved

    def _keep_reserve(self, reserved: int) -> None:
        self._margin = self.kv.num_free - reserved
        self._margin_key = self._reserve_state()

    def _reserve_now(self) -> int | None:
        """The reserve if the carried margin is still valid (None: it must be summed again)."""
        if self._margin_key == self._reserve_state():
            return self.kv.num_free - self._margin
        return None

    def _finished_term(self, request: Request) -> int:
        """What a running request that just finished still added to the reserve before it left.

        Its blocks were freed (unless held for a transfer); it held one block per `block_size`
        tokens computed (admission took blocks for its hits and first chunk, every allocation
        since for the tokens computed, clipped at the context limit).
        """
        size = self.kv.block_size
        held = len(request.blocks)
        if not held:
            computed = request.num_computed if request.num_computed < self.max_model_len else self.max_model_len
            held = -(-computed // size)
        need = self._need_blocks(request) - held
        return need if need > 0 else 0

    def expect_transfer(self, request: Request) -> None:
        self._transfers_seen = True
        super().expect_transfer(request)

    def add_transferred(self, request: Request) -> None:
        self._transfers_seen = True
        super().add_transferred(request)

    def update_from_output(self, done: PassResult) -> None:
        carried = self.policy == "GUARANTEED_NO_EVICT" and self.speculation is None and not self._transfers_seen
        reserved = self._reserve_now() if carried else None
        super().update_from_output(done)
        if reserved is not None:
            # Finished running requests leave the reserve; nothing else here moves it.
            for request in done.finished:
                reserved -= self._finished_term(request)
            self._keep_reserve(reserved)

    # ------------------------------------------------------------------ the decode pass

    def schedule(self) -> SchedulerOutput:
        if self.speculation is not None or self.batch_waiting:
            self.reference_passes += 1
            return super().schedule()
        self._take_transferred(self.max_batch_size)   # as the reference does first (it is idempotent)
        kv = self.kv
        size = kv.block_size
        max_len = self.max_model_len
        generating: list[Request] = []
        needs: list[int] = []
        total = 0
        for request in self.running:
            placeholders = request.placeholders
            computed = request.num_computed
            need = request.prompt_len + request.num_output + placeholders - computed
            if need <= 0:
                continue
            # `_last_token_in_flight`, written out: with overlap, such a request sits out.
            if placeholders > 0 and computed + 2 - placeholders >= request.prompt_len + request.max_tokens:
                continue
            computed += 1
            if need != 1 or computed > max_len:
                return self._reference_pass()   # a prompt mid-way, or the context limit
            blocks = -(-computed // size) - len(request.blocks)
            if blocks > 0:
                total += blocks
            generating.append(request)
            needs.append(blocks)
        count = len(generating)
        budget = self.max_num_tokens
        # The batch, the token budget and the free blocks hold every generation request: the
        # micro-batch scheduler takes them all and MAX_UTILIZATION pauses nobody (its check
        # counts these same blocks).
        if count > self.max_batch_size or count > budget or total > kv.num_free:
            return self._reference_pass()
        out = SchedulerOutput()
        if count:
            carried = self._margin_key == self._reserve_state()
            kv.allocate_needs(generating, [1] * count, needs, total)
            if carried:
                self._margin_key = self._reserve_state()   # each took blocks its reserve counted
            self._commit_decodes(out, generating)
            budget -= count
        reserved = self._admit_new(out, budget)
        if reserved is not None and self.policy == "GUARANTEED_NO_EVICT":
            self._keep_reserve(reserved)
        self._commit_admissions(out, count)
        self.fused_passes += 1
        return out

    def _reference_pass(self) -> SchedulerOutput:
        self.reference_passes += 1
        return super().schedule()

    def _commit_decodes(self, out: SchedulerOutput, generating: list[Request]) -> None:
        """The entries, with `_update_after_schedule`'s bookkeeping for a one-token decode done
        as each is made: its token reaches the known tokens' end, so it samples, with no drafts."""
        entries = out.entries
        overlap = self.async_scheduling
        for request in generating:
            before = request.num_computed
            entry = PassEntry(request, 1, before, "running")
            request.num_computed = before + 1
            request.in_flight += 1
            request.is_prefill_chunk = False
            entry.samples = True
            entry.is_decode = before >= request.prompt_len
            if overlap:
                request.placeholders += 1
            entries.append(entry)

    def _commit_admissions(self, out: SchedulerOutput, decodes: int) -> None:
        """`_update_after_schedule` for the entries after the first `decodes` (committed already)."""
        if len(out.entries) == decodes:
            out.num_tokens = decodes
            return
        admitted = SchedulerOutput()
        admitted.entries = out.entries[decodes:]
        super()._update_after_schedule(admitted)
        out.num_tokens = decodes + admitted.num_tokens
