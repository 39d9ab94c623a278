"""What one scheduler call decided, and what its pass produced."""

from __future__ import annotations

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


class ScheduledPass:
    """A scheduler call's decision; once it runs, its timing and outputs."""

    __slots__ = ("entries", "preempted", "num_tokens", "free_blocks", "index", "start_ns", "end_ns",
                 "delivered", "finished", "group_step", "group_size", "group_context",
                 "bulk_deliveries", "bulk_gap_ns", "group_steps", "step_durations", "load_ns", "kv_peak",
                 "group_warm", "bulk_warmup", "late_previous_ns", "early_steps", "early_records", "kv_used")

    def __init__(self) -> None:
        self.entries: list[PassEntry] = []
        self.preempted: list[Request] = []
        self.num_tokens = 0
        self.free_blocks = 0        # free KV blocks right after scheduling
        self.index = -1             # pass number on its worker (set when it runs)
        self.start_ns = 0
        self.end_ns = 0
        self.delivered: list[Request] = []  # filled when the outputs are processed
        self.finished: list[Request] = []
        # The fast engine's lockstep decode group, held as aggregates (engine/vllm/decode_group.py):
        self.group_step = 0         # the group's step in this pass (0: none)
        self.group_size = 0         # members decoding one token each
        self.group_context = 0      # Σ of their context lengths
        self.group_warm = 0         # members that are warm-up requests
        self.bulk_deliveries = 0    # members whose token arrives one pass after their previous one
        self.bulk_gap_ns = 0        # that gap (this pass's end - the previous pass's end; a run's pass)
        self.bulk_warmup = 0        # bulk deliveries to warm-up requests (not in the ITL)
        # A per-request backend's run (engine/decode_runs.py): when the previous token came, for
        # each measured request that got it before the run started (its first gap is longer).
        self.late_previous_ns: list[int] | tuple = ()
        # Fast-forward: this record stands for `group_steps` identical passes back to back.
        self.group_steps = 1
        self.step_durations = None  # their durations (ns), when group_steps > 1 and they differ
        self.load_ns = 0            # KV offload: copying host-tier prefix hits back to the GPU
        self.kv_peak = 0            # a fast-forwarded run: KV blocks used at the end of its next-to-last pass
        # A run past some members' last tokens (engine/vllm/group_runs.py) reports its passes up to
        # each such finish as a record of their own, at that pass end: `early_records`, covering
        # its first `early_steps` passes. Such a record knows its KV usage ahead (`kv_used`;
        # -1: read the cache when the record is reported).
        self.early_steps = 0
        self.early_records: list[ScheduledPass] | tuple = ()
        self.kv_used = -1

    def __bool__(self) -> bool:
        return self.num_tokens > 0
