"""The pass contract: what a scheduler call decided, what its pass produced, and runs of passes.

As in vLLM's engine core, three things with one writer each:

- `SchedulerOutput`: what one scheduler call decided (the scheduler writes it): the
  requests scheduled with their tokens, the preempted ones, the free blocks after it;
  for vLLM's fast engine also the lockstep decode group's share, held as aggregates.
- `PassRun`: a fast-forwarded run, the scheduled pass standing for `steps` identical
  decode passes back to back (the scheduler's `extend` writes it, engine/decode_runs.py
  and engine/vllm/group_runs.py).
- `PassResult`: what a pass (or a run's passes) produced, reported at its end: when it
  started and ended, which requests it delivered a token to by name, which finished. The
  worker makes it when the pass starts; `update_from_output` fills the outputs.

The collector (metrics/collector.py) reads a result's `delivered` and its
`token_gaps`, which report the gaps of the tokens delivered in aggregate (a decode
group's, a run's) without naming them; it never looks into how they were held.
A pass log lists every logical pass by request: `PassResult.logical_passes` expands a
run into them, and only a pass log or per-request token times ask for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from servesim.engine.request import Request


class PassEntry:
    """One request's share of a pass."""

    __slots__ = ("request", "tokens", "computed_before", "kind", "samples", "is_decode", "drafts")

    def __init__(self, request: Request, tokens: int, computed_before: int, kind: str) -> None:
        self.request = request
        self.tokens = tokens
        self.computed_before = computed_before  # KV already computed (or prefix-cached) before this chunk
        self.kind = kind                        # "running", "new" (first admission) or "resumed"
        self.samples = False                    # the chunk reaches the known tokens' end: a token is sampled
        self.is_decode = False                  # a running request computing just its newest token (+ drafts)
        self.drafts = 0                         # speculative tokens verified after the newest token


class SchedulerOutput:
    """A scheduler call's decision (vLLM's `SchedulerOutput`)."""

    __slots__ = ("entries", "preempted", "num_tokens", "free_blocks", "load_ns",
                 "group_step", "group_size", "group_context", "group_warm", "members", "run")

    def __init__(self) -> None:
        self.entries: list[PassEntry] = []
        self.preempted: list[Request] = []
        self.num_tokens = 0         # tokens computed (a run: over all its passes)
        self.free_blocks = 0        # free KV blocks right after scheduling
        self.load_ns = 0            # KV offload: copying host-tier prefix hits back to the GPU
        # The fast engine's lockstep decode group, held as aggregates (engine/vllm/decode_group.py):
        self.group_step = 0         # the group's step in this pass (0: none)
        self.group_size = 0         # members decoding one token each
        self.group_context = 0      # Σ of their context lengths
        self.group_warm = 0         # members that are warm-up requests
        # The group's members active at group_step, by admission order: kept only when a pass
        # log or token times are asked for (`DecodeGroup.active_members`).
        self.members: list[Request] | tuple = ()
        self.run: PassRun | None = None   # set when the pass stands for a fast-forwarded run

    def __bool__(self) -> bool:
        return self.num_tokens > 0


class GapSink(Protocol):
    """Where inter-token gaps go (metrics/histogram.py's LogHistogram is one)."""

    def add(self, value: int, count: int = 1) -> None: ...

    def add_many(self, values: list[int], count: int = 1) -> None: ...


class PassRun:
    """`steps` identical decode passes that one scheduled pass stands for."""

    __slots__ = ("steps", "durations", "gap_ns", "per_pass", "late_previous_ns", "kv_peak", "early",
                 "early_steps", "free_blocks", "opens")

    def __init__(self, steps: int, durations: list[int] | None, gap_ns: int) -> None:
        self.steps = steps
        self.durations = durations  # each reported pass's duration (ns); None: every one lasts gap_ns
        self.gap_ns = gap_ns
        self.per_pass = 0           # measured requests given a token in each reported pass
        # A per-request backend's run (engine/decode_runs.py): when the previous token came, for
        # each measured request that got it before the run started (its first gap is longer).
        self.late_previous_ns: list[int] | tuple = ()
        self.kv_peak = 0            # KV blocks used at the end of its next-to-last pass
        # A run past some members' last tokens (engine/vllm/group_runs.py) reports its passes up to
        # each such finish as a result of its own, at that pass end: `early`, covering its first
        # `early_steps` passes; `durations` then covers the passes after them.
        self.early: list[PassResult] | tuple = ()
        self.early_steps = 0
        # Pass logs only: the free KV blocks right after scheduling each reported pass, as the
        # engine schedules them one by one (None: not asked for).
        self.free_blocks: list[int] | None = None
        self.opens = True           # its result reports the run's first pass (False: an early one does)

    @property
    def reported(self) -> int:
        """The passes its own result reports (the others went in early results)."""
        return self.steps - self.early_steps

    def ends_ns(self, start_ns: int) -> list[int]:
        """Each reported pass's end."""
        ends = []
        end = start_ns
        if self.durations is None:
            for _ in range(self.reported):
                end += self.gap_ns
                ends.append(end)
        else:
            for duration in self.durations:
                end += duration
                ends.append(end)
        return ends


class LogicalPass:
    """One pass as the reference engine runs it, every request by name (pass logs, token times)."""

    __slots__ = ("index", "start_ns", "end_ns", "scheduled", "prefix_hits", "preempted", "finished",
                 "free_blocks", "delivered")

    def __init__(self, *, index: int, start_ns: int, end_ns: int, scheduled: list[tuple[int, int]],
                 prefix_hits: list[tuple[int, int]], preempted: list[int], finished: list[int],
                 free_blocks: int, delivered: list[Request]) -> None:
        self.index = index
        self.start_ns = start_ns
        self.end_ns = end_ns
        self.scheduled = scheduled          # (request id, tokens), in the engine's order
        self.prefix_hits = prefix_hits      # (request id, tokens computed before) of admissions
        self.preempted = preempted
        self.finished = finished
        self.free_blocks = free_blocks
        self.delivered = delivered          # requests that received a token at its end


class PassResult:
    """What a pass, or a run's passes, produced; reported at its end."""

    __slots__ = ("scheduled", "index", "start_ns", "end_ns", "delivered", "finished",
                 "aggregate", "gap_ns", "run", "kv_used")

    def __init__(self, scheduled: SchedulerOutput, index: int, start_ns: int) -> None:
        self.scheduled = scheduled
        self.index = index          # its first pass's number on its worker
        self.start_ns = start_ns
        self.end_ns = 0
        self.delivered: list[Request] = []  # requests given a token by name (filled at its end)
        self.finished: list[Request] = []
        # Tokens delivered in aggregate (not in `delivered`): to `aggregate` measured requests in
        # each pass, each one pass after their previous token; a single pass's gap is `gap_ns`.
        self.aggregate = 0
        self.gap_ns = 0
        self.run: PassRun | None = None     # the run whose passes it reports
        self.kv_used = -1           # KV blocks in use at its end, when known ahead (-1: read the cache)

    def token_gaps(self, sink: GapSink) -> None:
        """Report the measured inter-token gaps of the tokens delivered in aggregate to `sink`
        (the ones `delivered` lists are the collector's to measure).

        Each gap is one pass, but the first of a request in a run whose previous token came
        before the run started (`PassRun.late_previous_ns`), which runs from that token. A run
        of varied passes reports its durations in one call (`add_many`): a run may be thousands
        of passes long.
        """
        count = self.aggregate
        if not count:
            return
        run = self.run
        if run is None:
            sink.add(self.gap_ns, count)
            return
        late = run.late_previous_ns
        durations = run.durations
        if durations is None:
            sink.add(run.gap_ns, count * (run.steps - run.early_steps) - len(late))
            first_end = self.start_ns + run.gap_ns
        else:
            sink.add_many(durations, count - len(late))
            if late:
                sink.add_many(durations[1:], len(late))
            first_end = self.start_ns + durations[0]
        if late:
            gaps: dict[int, int] = {}
            for previous in late:
                gap = first_end - previous
                gaps[gap] = gaps.get(gap, 0) + 1
            for gap, count in gaps.items():
                sink.add(gap, count)

    def logical_passes(self) -> Iterator[LogicalPass]:
        """Its passes as the reference engine runs them, every request by name.

        Decode-group members decode one token each, placed among the explicit running requests
        by admission order; a run's passes repeat its first pass's decodes (less the members
        that left); its preemptions and admissions belong to its first pass, its finishes to
        its last. Only a pass log or per-request token times ask for this: it costs O(batch)
        per logical pass.
        """
        scheduled = self.scheduled
        run = self.run
        entries = scheduled.entries
        members = scheduled.members
        if run is None:
            ends = [self.end_ns]
            opens = True
            first_step = scheduled.group_step
        else:
            ends = run.ends_ns(self.start_ns)
            opens = run.opens
            first_step = scheduled.group_step + run.early_steps
        last = len(ends) - 1
        start = self.start_ns
        named = {id(request) for request in self.delivered}
        for i, end in enumerate(ends):
            active = [m for m in members if m.group_final >= first_step + i] if members else []
            batch = _in_engine_order(entries, active)
            if run is None:
                delivered = self.delivered + [m for m in active if id(m) not in named]
            else:
                delivered = [e.request for e in entries] + active
            head = i == 0 and opens
            yield LogicalPass(
                index=self.index + i, start_ns=start, end_ns=end, scheduled=batch,
                prefix_hits=[(e.request.request_id, e.computed_before) for e in entries
                             if e.kind != "running"] if head else [],
                preempted=[r.request_id for r in scheduled.preempted] if i == 0 else [],
                finished=[r.request_id for r in self.finished] if i == last else [],
                free_blocks=scheduled.free_blocks if head else run.free_blocks[i],
                delivered=delivered)
            start = end


def _in_engine_order(entries: list[PassEntry], members: list[Request]) -> list[tuple[int, int]]:
    """(request id, tokens) as the reference lists them: running requests in admission order,
    decode-group members among them, then admissions."""
    if not members:
        return [(e.request.request_id, e.tokens) for e in entries]
    running = [(e.request.seq, e.request.request_id, e.tokens) for e in entries if e.kind == "running"]
    running += [(m.seq, m.request_id, 1) for m in members]
    running.sort()
    return ([(request_id, tokens) for _, request_id, tokens in running]
            + [(e.request.request_id, e.tokens) for e in entries if e.kind != "running"])
