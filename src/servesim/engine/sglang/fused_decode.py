"""SGLang's decode pass in one visit per request, with the run check's sums made in the same visit.

`FastSglangScheduler._decode_pass` visits the batch twice (its blocks counted, then
`_commit_decodes`), and a run from the pass visits it a third time (`DecodeRuns._quiet_pages`'
sums). On one-token pages the counting visit can be skipped when no retraction can happen:

- a running request holds a page for every token it has computed (its KV is stored), so a
  decode needs one page if it holds exactly its computed tokens and none if it holds more;
  with at least as many free pages as running requests the pass's pages always fit, the case
  where the reference neither retracts nor falls back;
- no request reaches the context limit (`max` over the computed counts, in C), so nothing
  takes the reference's path.

The visit then commits each decoder as `_commit_decodes` does and notes who needs a page; the
pages are taken afterwards and given out in batch order (the queue gives the same pages in the
same order as one take before the loop), then the caching marks that touch the cache, as the
engine makes them after its allocation (as engine/sglang/behind.py does for its pass).

The same visit makes `_quiet_pages`' sums. Between the pass's commit and the run check, only
outputs of a pass already in flight are processed (with overlap, the prefill pass before it),
and they change only their own requests, the ones with tokens in flight as the pass was made:
those requests' outputs and stale counts are read again at the check (`quiet_sums`), every
other number is final. A request that finishes there leaves the batch, and the run check stops
at its first test. Held to the reference by tests/test_sglang_fused_decode.py and the
differential tests.
"""

from __future__ import annotations

from operator import attrgetter

from servesim.engine.passes import PassEntry, SchedulerOutput
from servesim.engine.sglang.behind import give_decode_pages

_num_computed = attrgetter("num_computed")


class QuietSums:
    """`_quiet_pages`' sums over a fused pass's entries; `recheck`: its requests that had tokens
    in flight as the pass was made (their outputs and stale counts may still move), left out
    of `cap` and `valid`'s stale test."""

    __slots__ = ("entries", "valid", "cap", "context", "deficit", "latest", "ahead", "recheck")


def fused_applies(scheduler) -> bool:
    """No retraction, no context limit, one-token pages (see the module docstring)."""
    kv = scheduler.kv
    running = scheduler.running
    return (kv.block_size == 1 and bool(running) and len(running) <= kv.num_free
            and max(map(_num_computed, running)) < scheduler.max_model_len)


def fused_decode_pass(scheduler) -> SchedulerOutput:
    """The decode pass of `FastSglangScheduler._decode_pass` where `fused_applies`, with its
    `QuietSums` left in `scheduler._quiet_sums`."""
    kv = scheduler.kv
    overlap = scheduler.async_scheduling
    caching = kv.enable_caching
    max_len = scheduler.max_model_len
    out = SchedulerOutput()
    entries = out.entries
    takers: list = []     # decoders holding exactly their computed tokens: one page each
    deferred: list = []   # (request, tokens): caching marks that touch the cache, after the pages
    recheck: list = []
    new_entry = object.__new__
    valid = True
    cap = 1 << 62
    context = 0
    deficit = 0
    latest = 0
    ahead = False
    for request in scheduler.running:
        before = request.num_computed
        computed = before + 1
        placeholders = request.placeholders
        prompt_len = request.prompt_len
        max_tokens = request.max_tokens
        # `_decoding`, written out: with overlap, a request whose last token is in flight sits out.
        if overlap and placeholders > 0 and computed + 1 - placeholders >= prompt_len + max_tokens:
            continue
        blocks = request.blocks
        held = len(blocks)
        if held <= before:
            if held < before:
                raise RuntimeError("a running request holds fewer pages than its computed tokens "
                                   "(this is a servesim bug)")
            takers.append(request)
            held = computed
        output = request.num_output
        known = prompt_len + output
        if caching:
            upto = computed if computed < known else known
            if upto > request.num_cached_blocks:
                if request.num_cached_blocks < request.keys.shared_blocks:
                    deferred.append((request, upto))
                else:   # past the shareable prefix: what `cache_full_blocks` does, without the call
                    request.num_cached_blocks = upto
        # `PassEntry(request, 1, before, "running")`, its fields stored here: no __init__ call.
        entry = new_entry(PassEntry)
        entry.request = request
        entry.tokens = 1
        entry.computed_before = before
        entry.kind = "running"
        known += placeholders
        in_flight = request.in_flight
        request.num_computed = computed
        request.in_flight = in_flight + 1
        request.is_prefill_chunk = chunk = computed < known
        entry.is_decode = is_decode = before >= prompt_len
        if chunk:
            entry.samples = False
            entry.drafts = 0
        else:
            entry.samples = True
            entry.drafts = drafts = computed - known
            if overlap:
                request.placeholders = placeholders + 1 + drafts
            if drafts:
                valid = False
        entries.append(entry)
        # `_quiet_pages`' sums on the committed counts; a request with tokens in flight has its
        # outputs and stale count read at the check.
        if not is_decode:
            valid = False
        if in_flight:
            recheck.append(request)
        else:
            if request.stale:
                valid = False
            allowed = max_len - prompt_len
            if max_tokens < allowed:
                allowed = max_tokens
            remaining = allowed - output
            if remaining < cap:
                cap = remaining
        context += computed
        spare = held - computed
        deficit -= spare
        if spare > 0:
            ahead = True
        if computed > latest:
            latest = computed
    if not entries:
        return out
    give_decode_pages(scheduler, takers, deferred)
    out.num_tokens = len(entries)
    scheduler._committed = out
    sums = scheduler._quiet_sums = object.__new__(QuietSums)
    sums.entries = entries
    sums.valid = valid
    sums.cap = cap
    sums.context = context
    sums.deficit = deficit
    sums.latest = latest
    sums.ahead = ahead
    sums.recheck = recheck
    return out


def quiet_sums(scheduler, entries: list, limit: int) -> tuple | None:
    """The fused pass's `_quiet_pages` sums for its `entries` as they stand now: (cap, context,
    deficit, latest, ahead), or None when they are not a fused pass's (count them request by
    request). A cap of 0 where some entry cannot run."""
    sums = scheduler._quiet_sums
    if sums is None or sums.entries is not entries:
        return None
    scheduler._quiet_sums = None
    cap = sums.cap if sums.cap < limit else limit
    if not sums.valid:
        return 0, 0, 0, 0, False
    max_len = scheduler.max_model_len
    for request in sums.recheck:   # outputs processed since the commit: their counts again
        if request.stale:
            return 0, 0, 0, 0, False
        allowed = max_len - request.prompt_len
        if request.max_tokens < allowed:
            allowed = request.max_tokens
        remaining = allowed - request.num_output
        if remaining < cap:
            cap = remaining
    return cap, sums.context, sums.deficit, sums.latest, sums.ahead
