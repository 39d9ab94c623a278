"""What a worker needs from the loop around it, and what a scheduler offers to fast-forward.

`EventSink` is the whole of a worker's view of the simulation (cluster/simulation.py
implements it): it schedules its own events, asks how far ahead nothing outside can
reach it, and hands over each finished pass. Nothing else of the loop is reachable from
engine/.

`FastForward` is the interface of a scheduler that can let one committed pass stand for a
run of identical decode passes (engine/decode_runs.py, engine/vllm/group_runs.py). A
scheduler says it has it with the class attribute `fast_forwards = True`
(SchedulerCore's default is False); the worker reads that flag, never the methods' presence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from servesim.engine.passes import PassResult, SchedulerOutput
    from servesim.engine.request import Request
    from servesim.engine.worker import Worker


class EventSink(Protocol):
    # Arrivals come only from the client's schedule, so no horizon reads the events pending: a
    # scheduler call that would do nothing then changes nothing by being left out (Worker.on_pass_end).
    scheduled_arrivals: bool

    def horizon(self, worker: Worker) -> int | None:
        """The earliest time something outside `worker` can change what it does (None: never)."""

    def push_scheduler_call(self, t: int, worker: Worker) -> None: ...

    def push_pass_end(self, t: int, worker: Worker, done: PassResult) -> None: ...

    def push_early_record(self, t: int, worker: Worker, record: PassResult) -> None:
        """Report the passes of a fast-forwarded run up to a finish inside it, at that pass end."""

    def on_pass_done(self, worker: Worker, done: PassResult) -> None:
        """A pass's outputs are processed: record it, route its finished requests on."""

    def on_aborted(self, worker: Worker, request: Request, now: int) -> None:
        """`worker` has dropped an aborted request and freed its blocks."""


class FastForward(Protocol):
    fast_forwards: bool                    # True for a scheduler that implements the rest
    commits_follow_late: bool              # async: a run's follow-up pass may be committed late
    behind_at_run_start: bool              # the worker's: its call behind a run comes as the run starts

    def may_run(self, decided: SchedulerOutput) -> bool:
        """Could `decided` start a run? `quiet_steps` says how long."""

    def quiet_steps(self, decided: SchedulerOutput, limit: int, now: int) -> int:
        """How many passes (at most `limit`) `decided` may stand for: nothing changes in them."""

    def run_segments(self, decided: SchedulerOutput, steps: int) -> list[tuple[int, int, int]]:
        """(passes, batch, Σ context) pieces of the run, for the timing model."""

    def extend(self, decided: SchedulerOutput, steps: int, durations, uniform_ns: int = 0) -> None:
        """Make `decided` stand for `steps` passes lasting `durations` (or `uniform_ns` each)."""

    def is_final(self, step: int) -> bool:
        """Does a member produce its last token at this group step (commits_follow_late only)?"""
