"""A decode run that starts at a pass whose next scheduler call would try, and fail, to admit.

SGLang tries a prefill at every scheduler call while something waits and the batch is not
marked full (`SglangScheduler._prefill_pass`); a failed try marks it full, and only a running
request leaving clears the mark. A retraction clears it too and puts its victims at the back
of the waiting queue, so the pass that retracts used to end every run: the call after it
tries to admit. That try reads only counts the run's first pass has already fixed, so it can
be settled as the run starts:

- with overlap, the engine makes that call right after the pass is started, seeing exactly
  the state the fast engine sees when it asks for a run (outputs of the pass before
  processed, this pass committed);
- without overlap, it makes it after this pass's outputs: every running request has one more
  output token (none finishes in it, or there would be no run), nothing else changes.

When the try would stop at its first candidate with the batch marked full (the running
limit reached, or the candidate's tokens at or above the budget), the run may start here:
its first pass keeps its retractions, and the mark is set as the run is made, as that call
sets it. Any other outcome (an admission, or a stop that leaves the mark clear) keeps the
explicit passes. Mixed chunks, a chunked prompt mid-way and a host KV tier are left to the
explicit passes. The run's first pass is reported as a result of its own
(`report_first_pass_apart`), so the records are the ones the explicit pass and the run after
it leave.
"""

from __future__ import annotations

from servesim.engine.passes import PassResult, PassRun, SchedulerOutput


def next_prefill_fails(scheduler, ahead: int, clip: int) -> bool:
    """Would the next scheduler call's prefill try stop at its first candidate and mark the
    batch full? `ahead`: output tokens each running request gains before that call (1 without
    overlap, 0 with); `clip`: SGLang's clip on a request's remaining output in the budget.
    The rules are `SglangScheduler._prefill_pass`'s for its first candidate with no chunk in
    progress and no mixed decodes, in the same arithmetic."""
    kv = scheduler.kv
    if (scheduler.chunked is not None or scheduler.enable_mixed_chunk or kv.host is not None
            or not scheduler.waiting or scheduler.max_prefill_tokens <= 0
            or (scheduler.chunked_prefill_size is not None and scheduler.chunked_prefill_size <= 0)):
        return False
    running = scheduler.running
    if len(running) >= scheduler.max_running_requests:
        return True
    page = kv.block_size
    head = scheduler._order()[0]
    hits = kv.lookup(head)
    extend = head.num_tokens - len(hits) * page
    total = extend + min(max(head.max_tokens - head.num_output, 0), clip)
    locked = sum(1 for block in hits if kv.is_evictable(block)) * page
    reserved = 0
    for request in running:
        left = request.max_tokens - request.num_output - ahead
        if left > 0:
            reserved += left if left < clip else clip
    total_offset = 0 + reserved * scheduler.new_token_ratio   # `mixed + _reserved_decode_tokens()`
    return total >= kv.num_free * page - total_offset - locked


def report_first_pass_apart(decided: SchedulerOutput, start_ns: int, kv_used: int) -> None:
    """Report the run's first pass as a result of its own (`PassRun.early`), at its end and with
    the KV usage the engine has then (`kv_used`), its preemptions and free blocks with it.

    A run that starts at a pass the engine could not have run past before (a retraction, or a
    prefill try still to come) then leaves the records the explicit pass and the run after it
    leave: the same KV samples, pass counts and deliveries, so outputs do not depend on whether
    the first pass ran alone."""
    run = decided.run
    entries = decided.entries
    first = SchedulerOutput()
    first.entries = entries
    first.preempted, decided.preempted = decided.preempted, []
    first.free_blocks = decided.free_blocks
    first.num_tokens = len(entries)
    decided.num_tokens -= len(entries)
    durations = run.durations
    part = PassRun(1, None if durations is None else durations[:1], run.gap_ns)
    part.per_pass = run.per_pass
    part.late_previous_ns, run.late_previous_ns = run.late_previous_ns, []
    if run.free_blocks is not None:
        part.free_blocks, run.free_blocks = run.free_blocks[:1], run.free_blocks[1:]
    result = PassResult(first, 0, start_ns)
    result.run = part
    result.aggregate = part.per_pass
    result.end_ns = start_ns + (run.gap_ns if durations is None else durations[0])
    result.kv_used = kv_used
    run.early = [result]
    run.early_steps = 1
    run.opens = False
    if durations is not None:
        run.durations = durations[1:]
