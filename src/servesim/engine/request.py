"""A request as an engine sees it: one state model for every phase.

There is no prefill or decode phase (as in vLLM v1): a request has
`num_computed` tokens whose KV is computed or scheduled, and `num_tokens`
known tokens (prompt plus outputs delivered so far). Each pass gives it tokens
so the first catches up with the second.
"""

from __future__ import annotations

from enum import IntEnum

from servesim.workload.prompt import BlockKeys


class Status(IntEnum):
    WAITING = 0      # never scheduled
    RUNNING = 1
    PREEMPTED = 2    # back in the waiting queue after preemption
    FINISHED = 3
    REJECTED = 4     # refused at the frontend (prompt too long)
    ABORTED = 5      # dropped by an abort (cluster/simulation.py's abort), its blocks freed


# The members as module globals, for the per-request paths: under CPython 3.11 reading
# `Status.RUNNING` is a lookup through the enum's metaclass (~75 ns), a global ~15 ns.
WAITING = Status.WAITING
RUNNING = Status.RUNNING
PREEMPTED = Status.PREEMPTED
FINISHED = Status.FINISHED
REJECTED = Status.REJECTED
ABORTED = Status.ABORTED


class Request:
    __slots__ = (
        # identity and size
        "request_id", "arrival_ns", "engine_arrival_ns", "prompt_len", "max_tokens",
        "requested_output", "keys",
        # scheduler state
        "status", "num_computed", "num_output", "placeholders", "in_flight", "stale",
        "is_prefill_chunk", "blocks", "num_cached_blocks", "num_preemptions", "seq", "live_private",
        "kv_hold",
        # speculative decoding: the drafter has drafts for it; verifications so far
        "drafting", "spec_steps",
        # membership of the fast engine's lockstep decode group (engine/vllm/decode_group.py)
        "group_first", "group_final", "group_computed", "group_offset",
        # measurements
        "first_scheduled_ns", "first_token_ns", "last_token_ns", "finish_ns", "cached_tokens", "host_cached_tokens",
        "worker", "route",
        # prefill/decode disaggregation (cluster/disaggregation.py)
        "handoff", "hold_kv", "prefill_worker", "transfer_start_ns", "transfer_end_ns", "transfer_bytes",
        # the request path's time from the engine's output to the client (engine/request_path.py)
        "outbound_ns",
    )

    def __init__(
        self,
        request_id: int,
        arrival_ns: int,
        engine_arrival_ns: int,
        prompt_len: int,
        max_tokens: int,
        requested_output: int,
        keys: BlockKeys | None,
    ) -> None:
        self.request_id = request_id
        self.arrival_ns = arrival_ns              # at the frontend (TTFT counts from here)
        self.engine_arrival_ns = engine_arrival_ns  # after tokenization
        self.prompt_len = prompt_len
        self.max_tokens = max_tokens              # output tokens the engine will produce
        self.requested_output = requested_output  # as the trace asked, before max_model_len clamps it
        self.keys = keys
        self.status = WAITING
        self.num_computed = 0
        self.num_output = 0
        self.placeholders = 0   # async scheduling: outputs scheduled but not yet delivered
        self.in_flight = 0      # tokens scheduled in passes whose outputs are not processed
        self.stale = 0          # in-flight tokens scheduled before the last preemption
        self.is_prefill_chunk = False
        self.blocks: list[int] = []
        self.num_cached_blocks = 0
        self.live_private = 0    # blocks past the shareable prefix that still have cache keys
        self.kv_hold = None      # the fast KV cache's note of its lazily counted blocks (engine/kv/cache.py)
        self.num_preemptions = 0
        self.drafting = False    # a pass sampled it since its last preemption: drafts come with its next token
        self.spec_steps = 0
        self.seq = -1            # admission order; the running list is ordered by it
        self.group_first = -1    # first group step, or -1 when not a group member
        self.group_final = -1    # group step that produces its last token
        self.group_computed = 0  # num_computed when it joined the group
        self.group_offset = 0    # group_computed - group_first, kept after it leaves (for retirement)
        self.first_scheduled_ns: int | None = None
        self.first_token_ns: int | None = None
        self.last_token_ns: int | None = None
        self.finish_ns: int | None = None
        self.cached_tokens: int | None = None   # prefix-cache hit at first admission (GPU)
        self.host_cached_tokens = 0              # ... and loaded from the host tier (KV offload)
        self.worker = ""
        self.route = None        # (router, worker index, tokens) to report back at completion
        self.handoff = None      # disaggregated serving: the trace request a prefill hands on
        self.hold_kv = False     # keep the KV blocks at finish (a prefill worker's, until sent)
        self.prefill_worker = ""
        self.transfer_start_ns: int | None = None
        self.transfer_end_ns: int | None = None
        self.transfer_bytes = 0
        self.outbound_ns = 0

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + self.num_output

    def __repr__(self) -> str:
        return (f"Request({self.request_id}, {self.status.name}, computed={self.num_computed}, "
                f"tokens={self.num_tokens}, blocks={len(self.blocks)})")
