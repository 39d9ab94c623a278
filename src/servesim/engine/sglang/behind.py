"""The decode pass committed behind a run, made in the run's own loop (overlap, one-token pages).

With overlap, SGLang's engine decides the pass after a run while the run's last pass is in
flight: the worker calls the scheduler right after the run starts (engine/worker.py), seeing
the state `DecodeRuns.extend` leaves (`behind_at_run_start`, set by the worker; a P/D decode
worker admitting handoffs at its next pass makes that call at the run's end instead). Nothing can reach the worker in between (a run starts
only with nothing in its intake, no abort pending and no event before its first pass end,
`Worker._fast_forward`), so that call's outcome is fixed when the run is made:

- no prefill: the run was quiet for admission (`FastSglangScheduler._admission_quiet`), so
  nothing waits or the batch is marked full (a run whose next call tries and fails to admit
  sets the mark as it is made, `_advance_run`); no chunk is mid-way, nothing was transferred;
- a decode pass of every running request but those whose last token the run's last pass
  produces (they sit out, `_decoding`): each holds exactly its computed tokens' pages after the
  run (one-token pages, `DecodeRuns._quiet_pages`'s closed form) and stays inside the context
  limit, so each decoder needs one page, and the run's pages were counted with one more pass
  for every request (`quiet_steps`' `behind`): nothing is retracted;
- the ratio decays once; the entries are `FastSglangScheduler._commit_decodes`'.

So `extend_with_behind` does the run's per-request update and that pass's commit in one visit
per request, and `schedule` hands the pass over. The KV operations keep the engine's order: the
run's pages are taken, the run's caching marks made request by request, then the pass's pages
taken and given out in batch order. Its caching marks touch the cache only for a request whose
shareable prefix is not yet cached (none in decode, as far as the engine's invariants go); any
such call waits until the pass's pages are given out, as in the engine. Held to the reference by
tests/test_sglang_behind.py and the differential tests.
"""

from __future__ import annotations

from servesim.engine.passes import PassEntry, SchedulerOutput
from servesim.engine.request import Status


def can_extend_with_behind(scheduler, decided: SchedulerOutput, steps: int) -> bool:
    """Is the call behind this run the decode pass described above (settled before any change)?"""
    deficit = scheduler._run_deficit
    # (A deficit is set only on one-token pages, which extend_with_behind relies on.)
    if (deficit is None or scheduler.kv.block_size != 1 or not scheduler.behind_at_run_start
            or not scheduler.async_scheduling or scheduler.speculation is not None
            or scheduler.chunked is not None or scheduler.transferred):
        return False
    count = len(decided.entries)
    # Free pages after the run's take must hold a page for every request (no retraction).
    return scheduler.kv.num_free - (deficit + count * (steps - 1)) >= count


def extend_with_behind(scheduler, decided: SchedulerOutput, steps: int, durations, uniform_ns: int) -> None:
    """`DecodeRuns.extend` on its closed-form (one-token page) path with overlap, fused with the
    commit of the decode pass behind the run, which it leaves in `scheduler._behind`. With
    one-token pages a request's full blocks are its tokens: no division by the block size."""
    kv = scheduler.kv
    extra = steps - 1
    caching = kv.enable_caching
    entries = decided.entries
    count = len(entries)
    total = scheduler._run_deficit + count * extra
    free_blocks = scheduler._run_free_blocks(decided, steps)
    pool: list[int] = []
    kv.take(total, pool)
    position = 0
    warm = 0
    warmup_below = scheduler.warmup_below
    start = scheduler._run_start
    late: list[int] = []
    behind = SchedulerOutput()
    behind_entries = behind.entries
    decoders: list = []
    deferred: list = []   # (request, tokens): caching marks that touch the cache, after the pages
    new_entry = object.__new__
    # The run's own outputs (its last pass's, processed at its end) are applied here too, unless
    # every request must be named: what must wait for the run's end is left, in batch order.
    settle = not scheduler.names_requests
    end_ns = start + (sum(durations[:steps]) if durations is not None else steps * uniform_ns)
    max_len = scheduler.max_model_len
    left: list = []   # (request, its caching mark waits, it finishes)
    for entry in entries:
        request = entry.request
        if request.request_id < warmup_below:
            warm += 1
        elif request.last_token_ns != start:
            late.append(request.last_token_ns)
        # The run: c - b + extra pages, outputs of every pass but the last processed.
        computed = request.num_computed + extra
        blocks = request.blocks
        need = computed - len(blocks)
        if need > 0:
            blocks += pool[position:position + need]
            position += need
        request.num_output = output = request.num_output + extra
        placeholders = request.placeholders
        prompt_len = request.prompt_len
        after = computed + 1
        known = prompt_len + output
        # The pass behind: a request whose last token is in flight sits out (`_decoding`).
        sits_out = placeholders > 0 and after + 1 - placeholders >= prompt_len + request.max_tokens
        if caching:
            # The run's caching mark, then the pass behind's: past the shareable prefix each only
            # raises the count (what `cache_full_blocks` does there), so one store does for both.
            cached = request.num_cached_blocks
            filled = computed - placeholders
            upto = cached if sits_out else after if after < known else known
            if filled > cached or upto > cached:
                shared = request.keys.shared_blocks
                if filled > cached:
                    if cached < shared:
                        request.num_computed = computed
                        kv.cache_full_blocks(request, filled)
                        cached = request.num_cached_blocks
                    else:
                        cached = filled
                if upto > cached:
                    if cached < shared:
                        deferred.append((request, upto))
                    else:
                        cached = upto
                request.num_cached_blocks = cached
        if sits_out:
            request.num_computed = computed
        else:
            request.num_computed = after
            decoders.append(request)
            # `PassEntry(request, 1, computed, "running")`, its fields stored here: no __init__ call.
            behind_entry = new_entry(PassEntry)
            behind_entry.request = request
            behind_entry.tokens = 1
            behind_entry.computed_before = computed
            behind_entry.kind = "running"
            request.in_flight += 1
            known += placeholders
            request.is_prefill_chunk = chunk = after < known
            behind_entry.is_decode = computed >= prompt_len
            if chunk:
                behind_entry.samples = False
                behind_entry.drafts = 0
            else:
                behind_entry.samples = True
                behind_entry.drafts = drafts = after - known
                request.placeholders = placeholders + 1 + drafts
            behind_entries.append(behind_entry)
        if settle and entry.samples:
            # `update_from_output` on this entry at the run's end (no stale tokens: the run's
            # check): one more output, delivered then, its placeholder gone (the pass behind's
            # commit included in the counts). A caching mark short of the shareable prefix, which
            # touches the cache, and a finish wait for the run's end (`settle_run_end`).
            request.in_flight -= 1
            request.num_output = output = output + 1
            request.last_token_ns = end_ns
            request.placeholders = placeholders = request.placeholders - 1
            waits = False
            if caching:
                cached = request.num_cached_blocks
                if cached < request.keys.shared_blocks:
                    waits = True
                elif request.num_computed - placeholders > cached:
                    request.num_cached_blocks = request.num_computed - placeholders
            finishes = output >= request.max_tokens or prompt_len + output >= max_len
            if waits or finishes:
                left.append((request, waits, finishes))
        elif settle:
            request.in_flight -= 1
    scheduler._advance_run(extra)
    # With overlap the run's last pass's pages are committed with it: all of them are its peak.
    scheduler._record_run(decided, steps, durations, uniform_ns, kv.num_used, free_blocks, warm, late)
    if decoders:
        give_decode_pages(scheduler, decoders, deferred)
        behind.num_tokens = len(decoders)
    scheduler._behind = behind
    scheduler._settled = (decided, left) if settle else None
    # Each of its decoders now holds exactly its computed tokens' pages; if each also stays two
    # tokens inside the context limit, a run from it needs two pages a decoder (FastSglangScheduler.quiet_steps).
    if scheduler._run_latest + steps + 2 <= scheduler.max_model_len:
        scheduler._behind_exact = behind


def settle_run_end(scheduler, done, left: list) -> None:
    """`update_from_output` for a run `extend_with_behind` settled: only the caching marks that
    touch the cache and the finishes, in batch order, as the per-entry update makes them."""
    kv = scheduler.kv
    before = len(scheduler.running)
    finished = done.finished
    stopped: list = []
    for request, waits, finishes in left:
        if waits:
            known = request.num_computed - request.placeholders   # one-token pages: tokens are blocks
            if known > request.num_cached_blocks:
                if request.num_cached_blocks < request.keys.shared_blocks:
                    kv.cache_full_blocks(request, known)
                else:
                    request.num_cached_blocks = known
        if finishes:
            request.status = Status.FINISHED
            if not request.hold_kv:
                kv.free(request)
            finished.append(request)
            stopped.append(request)
    if stopped:
        scheduler.running = without(scheduler.running, stopped)
    if len(scheduler.running) < before:
        scheduler.batch_is_full = False


def without(running: list, stopped: list) -> list:
    """`running` less the `stopped` requests, in order, as a new list (the reference's comprehension).
    One request (a run's end in the steady phase) is cut out by position, in C."""
    if len(stopped) == 1:
        index = running.index(stopped[0])   # by identity: requests define no __eq__
        return running[:index] + running[index + 1:]
    gone = {request.request_id for request in stopped}
    return [r for r in running if r.request_id not in gone]


def give_decode_pages(scheduler, takers: list, deferred: list) -> None:
    """The end of a decode pass committed in one visit (this module's pass behind, fused_decode.py's
    pass): the ratio's decay, one page for each of `takers` in batch order (one take gives the
    queue's pages in the order a take per request would), then the `deferred` (request, tokens)
    caching marks that touch the cache, as the engine makes them after its allocation."""
    scheduler.new_token_ratio = max(scheduler.new_token_ratio - scheduler.decay, scheduler.min_ratio)
    kv = scheduler.kv
    pages: list[int] = []
    kv.take(len(takers), pages)
    for request, page in zip(takers, pages):
        request.blocks.append(page)
    for request, upto in deferred:
        kv.cache_full_blocks(request, upto)
