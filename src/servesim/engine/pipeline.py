"""One engine process under pipeline parallelism (pp > 1): a batch queue of depth pp.

This follows vLLM 0.32's engine core with a pipeline (`v1/engine/core.py`
`EngineCore.step_with_batch_queue`, the queue sized by `VllmConfig.max_concurrent_batches`,
which is the pipeline size when async scheduling is off); docs/modeling/vllm.md,
"Pipeline parallelism", derives the admission rule this gives:

- Each engine step reads what has arrived, schedules one batch and hands it to the
  executor without waiting. While the queue has room and that batch had tokens, the engine
  steps again at once; otherwise (queue full, or nothing left to schedule) it blocks on the
  oldest batch, processes its outputs when it completes, and steps again.
- A batch runs through the pp stages in order: stage i starts when the batch has left
  stage i − 1 and its activations have arrived, and when stage i has finished the batch
  before. So batch k + 1 enters stage 1 as soon as batch k has moved on to stage 2.
- A request whose every known token is scheduled in a batch in flight gets no tokens until
  that batch's outputs are processed (the scheduler's `num_new_tokens == 0` case, which
  vLLM's scheduler documents for pp); a prompt's later chunk may go into the next batch.
- Arrivals are read as under async scheduling (engine/worker.py): one exactly at a pass
  end is read at the next call unless the engine is idle then.

The timing model prices the whole pass on one stage's tp GPUs; each stage takes its share
(`ceil(duration / pp)`), and each boundary adds the activation send (`PipelineStages`).
"""

from __future__ import annotations

from collections import deque

from servesim.engine.passes import PassResult, SchedulerOutput
from servesim.engine.scheduler_core import SchedulerCore
from servesim.engine.worker import Worker
from servesim.timing.base import TimingModel

# One NCCL point-to-point send's fixed cost between stages (launch and handshake).
SEND_LATENCY_NS = 10_000
# vLLM sends two tensors per token between stages (IntermediateTensors: hidden_states and
# residual), in the activations' dtype (bf16).
SEND_TENSORS, ACTIVATION_BYTES = 2, 2


class PipelineStages:
    """Stage times and the activation send at each stage boundary of one worker."""

    def __init__(self, pp: int, stage_gpus: int, tp: int, hidden: int, nvlink_gb_s: float,
                 nvlink_domain: int, network_gb_s: float) -> None:
        self.pp = pp
        # Each TP rank sends its 1/tp slice to its peer in the next stage (vLLM's
        # send_tensor_dict with the TP group to all-gather on arrival), over NVLink one way
        # inside an NVLink domain and over the NIC where the boundary leaves it.
        bytes_per_token = SEND_TENSORS * hidden * ACTIVATION_BYTES / tp
        self.boundary_ns_per_token = []
        for stage in range(1, pp):
            first = stage * stage_gpus   # the stage's first GPU in the worker
            crosses = (first - 1) // nvlink_domain != first // nvlink_domain
            link_bytes_s = network_gb_s * 1e9 if crosses else nvlink_gb_s / 2 * 1e9
            self.boundary_ns_per_token.append(bytes_per_token / link_bytes_s * 1e9)

    def stage_ns(self, duration_ns: int) -> int:
        """One stage's share of a pass the timing model priced whole."""
        return -(-duration_ns // self.pp)

    def send_ns(self, boundary: int, tokens: int) -> int:
        """The activation send of `tokens` tokens into stage `boundary` (1 … pp − 1)."""
        return round(tokens * self.boundary_ns_per_token[boundary - 1]) + SEND_LATENCY_NS


class PipelineWorker(Worker):
    """A worker whose engine keeps up to pp batches in flight (see the module docstring).

    `executing` is the oldest batch in flight (the next to complete), as the loop and the
    routers read it.
    """

    def __init__(self, name: str, scheduler: SchedulerCore, timing: TimingModel, stages: PipelineStages) -> None:
        super().__init__(name, scheduler, timing, async_scheduling=False)
        self.stages = stages
        self.depth = stages.pp               # max_concurrent_batches
        self.fast_forward = False
        self.in_flight: deque[PassResult] = deque()
        self.stage_free = [0] * stages.pp    # when each stage finishes the batch it holds
        self._busy_until = 0
        self.min_stage_ns = stages.stage_ns(self.min_pass_ns)

    def next_output_bound(self, now: int) -> int | None:
        # Batches complete in order, and one not yet scheduled ends after every one in flight.
        for batch in self.in_flight:
            if any(entry.samples for entry in batch.scheduled.entries):
                return batch.end_ns
        if self.in_flight:
            return self.in_flight[-1].end_ns + self.min_stage_ns
        whole = self.min_stage_ns * self.depth
        if self.call_pending or self.intake:
            return now + whole
        arrival = self.next_engine_arrival()
        return None if arrival is None else arrival + whole

    def on_pass_end(self, now: int, done: PassResult) -> None:
        self.in_flight.popleft()
        self.executing = self.in_flight[0] if self.in_flight else None
        self.scheduler.update_from_output(done)
        self.events.on_pass_done(self, done)
        self._request_call(now)

    def on_scheduler_call(self, now: int, _: object = None) -> None:
        self.call_pending = False
        if self.aborts and not self.in_flight:
            self.apply_aborts(now)
        if not self.in_flight:
            self._idle_reads()   # nothing in flight: the engine's loop reads at once
            self._read_intake(now, inclusive=False)
            if not self.scheduler.has_unfinished():
                self._read_intake(now, inclusive=True)
            decided = self._schedule_nonempty()
        elif self.aborts:
            return   # schedule nothing more: the queue drains and the aborts apply (abort.md)
        else:
            self._read_intake(now, inclusive=False)
            decided = self._schedule() if self.scheduler.has_unfinished() else None
        if not decided:
            return   # the engine blocks on its oldest batch
        self._start(decided, now)
        if len(self.in_flight) < self.depth:
            self._request_call(now)   # room in the queue: the engine steps again at once

    def _start(self, decided: SchedulerOutput, now: int) -> int:
        stages, free = self.stages, self.stage_free
        stage = stages.stage_ns(self._pass_ns(decided))
        start = max(now, free[0])
        end = free[0] = start + stage + decided.load_ns   # host-tier loads land before stage 1
        for boundary in range(1, stages.pp):
            end = free[boundary] = max(end + stages.send_ns(boundary, decided.num_tokens), free[boundary]) + stage
        result = PassResult(decided, self.num_passes, start)
        result.end_ns = end
        self.num_passes += 1
        # Busy while any batch is in flight: starts and ends only grow, so the union is additive.
        self.busy_ns += end - max(start, self._busy_until)
        self._busy_until = end
        for entry in decided.entries:
            if entry.request.first_scheduled_ns is None:
                entry.request.first_scheduled_ns = now
        self.in_flight.append(result)
        if self.executing is None:
            self.executing = result
        self.events.push_pass_end(end, self, result)
        return now
