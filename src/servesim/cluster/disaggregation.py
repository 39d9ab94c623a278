"""Prefill/decode disaggregation: a prefill pool, a decode pool, and KV transfers between them.

A request is routed to a prefill worker, which computes its prompt and its first
token (as a request with max_tokens 1) and keeps the KV blocks. The decode router
then picks a decode worker; that worker reserves blocks for the prompt (after a
prefix-cache lookup: blocks it already holds are not sent) as soon as it has them
free, and until then the prefill worker waits, holding its blocks (back-pressure).
The transfer takes latency + bytes / bandwidth, bytes being the KV of the prompt
blocks the decode worker lacks. When it completes, the prefill worker frees its
blocks and the decode worker admits the request at its next scheduler call (as
vLLM does for received KV, synchronously even with async scheduling on).

`first_token_from` says which token the client sees first (docs/modeling/disaggregation.md):
- `prefill`: the prefill worker's token streams to the client as it is produced;
  the decode worker continues from it (its KV holds the whole prompt);
- `decode`: the prefill worker's token is dropped; the decode worker, holding the KV
  of all but the last prompt token, recomputes that token and samples the first
  token itself after the transfer.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import TYPE_CHECKING

from servesim.config.run_spec import TransferSpec
from servesim.engine.request import Request, Status
from servesim.engine.worker import Worker
from servesim.workload.trace import TraceRequest

if TYPE_CHECKING:
    from servesim.cluster.simulation import Cluster, Simulation

TRANSFER_DONE = 1  # handled with the frontend arrivals, before engine arrivals and scheduler calls


class Disaggregation:
    def __init__(self, sim: Simulation, cluster: Cluster, transfer: TransferSpec) -> None:
        self.sim = sim   # the loop: route, push and complete (cluster/simulation.py)
        self.prefill_workers = cluster.roles["prefill"].workers
        self.decode_workers = cluster.roles["decode"].workers
        self.decode_factory = cluster.factories["decode"]
        self.decode_router = cluster.routers["decode"]
        self.bytes_per_s = transfer.bytes_per_s
        self.latency_ns = transfer.latency_ns
        self.first_token_from = transfer.first_token_from
        self.handoff_admission = transfer.handoff_admission
        self.kv_bytes_per_token = transfer.kv_bytes_per_token
        self.pending: dict[str, deque] = {}
        self.holding: dict[str, int] = {}   # prefills whose KV a prefill worker holds for a transfer
        self._transfers_due: list[int] = []   # end times of the transfers in flight (a heap)

    # ------------------------------------------------------------------ prefill side

    def on_arrival(self, now: int, engine_arrival: int, trace_request: TraceRequest) -> None:
        request = self.sim.route(now, engine_arrival, trace_request, "prefill", max_output=1)
        if request.status != Status.REJECTED:
            request.hold_kv = True
            request.handoff = trace_request

    def on_finished(self, worker: Worker, request: Request, now: int) -> bool:
        """True when the request's life goes on elsewhere (a prefill handing over)."""
        if worker.role == "prefill":
            self._hand_over(worker, request, now)
            return True
        prefill = request.handoff
        request.cached_tokens = prefill.cached_tokens
        request.host_cached_tokens = prefill.host_cached_tokens
        request.num_preemptions += prefill.num_preemptions
        request.first_scheduled_ns = prefill.first_scheduled_ns
        return False

    def _hand_over(self, prefill_worker: Worker, prefill: Request, now: int) -> None:
        sim = self.sim
        trace_request = prefill.handoff
        factory = self.decode_factory
        router = self.decode_router
        keys = None
        if factory.sched.prefix_caching:
            # The prefill side's keys serve when both sides cut the prompt into the same blocks.
            keys = prefill.keys
            if keys is None or keys.block_size != factory.sched.kv_block_size:
                keys = factory.keys(trace_request)
        index = router.choose(trace_request.input_length, trace_request.output_length, lambda worker: keys,
                              trace_request, now)
        decode_worker = self.decode_workers[index]
        request = factory.make(trace_request, prefill.arrival_ns, prefill.engine_arrival_ns, keys=keys)
        request.worker = decode_worker.name
        request.prefill_worker = prefill_worker.name
        request.handoff = prefill
        if self.first_token_from == "prefill":
            request.num_output = 1
            request.first_token_ns = request.last_token_ns = prefill.first_token_ns
            if request.num_output >= request.max_tokens:   # nothing left to decode
                prefill_worker.scheduler.release_held(prefill)
                prefill_worker.wake(now)
                request.finish_ns = now
                self.on_finished(decode_worker, request, now)
                sim.complete(request, now)
                return
        tokens = trace_request.input_length + request.max_tokens
        router.sent(index, tokens, request)
        request.route = (router, index, tokens)
        self.holding[prefill_worker.name] = self.holding.get(prefill_worker.name, 0) + 1
        queue = self.pending.get(decode_worker.name)
        if queue is None:
            queue = self.pending[decode_worker.name] = deque()
        queue.append((request, prefill, prefill_worker))
        self.reserve(decode_worker, now)

    # ------------------------------------------------------------------ decode side

    def reserve(self, decode_worker: Worker, now: int) -> None:
        """Start the transfers the decode worker now has free blocks for, in arrival order."""
        queue = self.pending.get(decode_worker.name)
        kv = decode_worker.scheduler.kv
        while queue:
            request, prefill, prefill_worker = queue[0]
            hits = kv.lookup(request)
            hit_tokens = len(hits) * kv.block_size
            if not decode_worker.scheduler.admits_transfer(request) or not kv.admit(
                    request, hits, request.prompt_len - hit_tokens, has_running=False, cache=False,
                    full_sequence=True):   # a transfer lands the whole prompt, on every backend
                # Back-pressure: the prefill worker keeps holding its blocks.
                decode_worker.scheduler.transfers_waiting = True
                return
            queue.popleft()
            decode_worker.scheduler.expect_transfer(request)
            request.transfer_bytes = round((request.prompt_len - hit_tokens) * self.kv_bytes_per_token)
            request.transfer_start_ns = now
            # The proxy's hop to the decode server (request path) comes before the KV pull.
            done = (now + self.sim.request_path.handoff_ns(request.prompt_len) + self.latency_ns
                    + round(request.transfer_bytes / self.bytes_per_s * 1e9))
            heapq.heappush(self._transfers_due, done)
            self.sim.push(done, TRANSFER_DONE, self._on_transfer_done,
                          (request, prefill, prefill_worker, decode_worker))
        decode_worker.scheduler.transfers_waiting = False

    def next_transfer_done(self) -> int | None:
        return self._transfers_due[0] if self._transfers_due else None

    def horizon(self, worker: Worker, now: int, bound: int | None) -> int | None:
        """`bound` (None: none yet), lowered to when the P/D handoff can next reach `worker`
        (Simulation.horizon). One pass, no lists: it is asked at every run a worker tries."""
        # A finished transfer frees a prefill worker's blocks and queues work on a decode
        # worker; a prefill pass end can reserve a decode worker's blocks for a handoff.
        due = self._transfers_due
        if due and (bound is None or due[0] < bound):
            bound = due[0]
        if worker.role != "decode":
            return bound
        # A prefill worker hands over only at the end of a pass that samples. Its bound is
        # never before the end of the pass it runs, so a pass ending at or past `bound` can
        # be passed over without looking at what it samples.
        for prefill in self.prefill_workers:
            executing = prefill.executing
            if executing is not None and bound is not None and executing.end_ns >= bound:
                continue
            t = prefill.next_output_bound(now)
            if t is not None and (bound is None or t < bound):
                bound = t
        # A decode pass end with handoffs queued for it starts their transfers; each
        # frees a prefill worker's blocks, whose next prefill may come to this worker.
        pending = self.pending
        for other in self.decode_workers:
            executing = other.executing
            if (executing is not None and other is not worker and (bound is None or executing.end_ns < bound)
                    and pending.get(other.name)):
                bound = executing.end_ns
        return bound

    def _on_transfer_done(self, now: int, job) -> None:
        heapq.heappop(self._transfers_due)
        request, prefill, prefill_worker, decode_worker = job
        prefill_worker.scheduler.release_held(prefill)
        prefill_worker.wake(now)
        self.holding[prefill_worker.name] -= 1
        request.transfer_end_ns = now
        kv = decode_worker.scheduler.kv
        # The blocks hold the prompt's KV now; with the decode convention the last prompt
        # token is recomputed there to sample the first token.
        request.num_computed = request.prompt_len - (1 if self.first_token_from == "decode" else 0)
        kv.cache_full_blocks(request, request.prompt_len)
        decode_worker.scheduler.add_transferred(request)
        decode_worker.wake(now)
        if self.sim.autoscalers:   # a draining prefill replica may have sent its last KV
            self.sim.after_scaled_change(prefill_worker, now)

    def owes(self, worker: Worker) -> bool:
        """Whether a worker still has part in a handoff: a prefill worker holding KV for a
        transfer, a decode worker with handoffs queued for it or KV on its way to it."""
        if worker.role == "prefill":
            return self.holding.get(worker.name, 0) > 0
        return bool(self.pending.get(worker.name)) or bool(worker.scheduler.incoming)

    def after_pass(self, worker: Worker, now: int) -> None:
        if worker.role == "decode" and self.pending.get(worker.name):
            self.reserve(worker, now)
