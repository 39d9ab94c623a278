"""What one scheduler call decided, and what its pass produced."""

from __future__ import annotations

from servesim.engine.request import Request


class PassEntry:
    """One request's share of a pass."""

    __slots__ = ("request", "tokens", "computed_before", "kind", "samples", "is_decode")

    def __init__(self, request: Request, tokens: int, computed_before: int, kind: str) -> None:
        self.request = request
        self.tokens = tokens
        self.computed_before = computed_before  # KV already computed (or prefix-cached) before this chunk
        self.kind = kind                        # "running", "new" (first admission) or "resumed"
        self.samples = False                    # the chunk reaches the known tokens' end: a token is sampled
        self.is_decode = False                  # a running request computing just its newest token


class ScheduledPass:
    """A scheduler call's decision; once it runs, its timing and outputs."""

    __slots__ = ("entries", "preempted", "num_tokens", "free_blocks", "index", "start_ns", "end_ns",
                 "delivered", "finished")

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

    def __bool__(self) -> bool:
        return self.num_tokens > 0
