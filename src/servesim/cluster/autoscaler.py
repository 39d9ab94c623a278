"""Autoscaling a role's replicas as a Kubernetes HorizontalPodAutoscaler scales a Deployment.

Followed: Kubernetes 1.31, `pkg/controller/podautoscaler/horizontal.go` (the sync loop every
`--horizontal-pod-autoscaler-sync-period`, `stabilizeRecommendationWithBehaviors`, the default
`behavior`) and `replica_calculator.go` (`GetMetricReplicas`: the ratio of the ready pods'
average to the target, no change within the tolerance). The rules (docs/fleets.md,
"Autoscaling"):

- every sync period (at k × period, k ≥ 1) the metric is averaged over the ready replicas
  and `desired = ceil(ready × average / target)`, unless |average / target − 1| ≤ tolerance
  (then the current count stays); clamped to [min_replicas, max_replicas], and a scale-up to
  at most max(2 × current, current + 4) (the default policies: 100 % or 4 pods a period);
- scale-down stabilisation: the count applied is the highest recommendation of the window
  (the current one included), so a dip shorter than the window removes nothing;
- a new replica (a fresh worker: its own empty KV cache) is provisioning for
  `weights per GPU / load_bandwidth + startup_s`; requests go to ready replicas only;
- a scale-down takes provisioning replicas first (newest first), then ready ones, newest
  first (the ReplicaSet controller deletes unready and younger pods first); a ready one
  drains: no new requests, removed once it holds none. In a P/D fleet each pool scales on
  its own; a prefill replica drains once its prefills are done and their KV sent, a decode
  replica once the transfers on their way to it have landed and their requests finished.

Live replicas (provisioning, ready or draining) cost GPU-hours while they exist, counted
over the run's window (first measured arrival to last finish) as a fixed fleet's are.
"""

from __future__ import annotations

import math
from collections import deque

from servesim.cluster.fleet import Role
from servesim.cluster.router import Router

PROVISIONING, READY, DRAINING, REMOVED = "provisioning", "ready", "draining", "removed"


class Autoscaler:
    def __init__(self, role: Role, router: Router, cfg) -> None:
        self.role = role
        self.router = router
        self.cfg = cfg
        self.states = [READY] * len(role.workers)
        router.ready = [True] * len(role.workers)
        self.period_ns = max(1, round(cfg.sync_period_s * 1e9))
        # The planner (cluster/planner.py) applies its count at once: no window.
        self.window_ns = round(getattr(cfg, "scale_down_stabilization_s", 0.0) * 1e9)
        weights = role.deployment.weight_bytes_per_gpu()   # each GPU loads its own shard at once
        self.provision_ns = round(weights / (cfg.load_bandwidth_gb_s * 1e9) * 1e9) + round(cfg.startup_s * 1e9)
        self.gpus_per_replica = role.spec.tp * role.spec.pp * role.spec.attention_dp
        self.recommendations: deque[tuple[int, int]] = deque()
        self.timeline: list[list] = []   # [time s, live, ready, metric average, replicas applied]
        self.changes: list[list] = []    # [time s, worker, its new state]
        self.born = [0] * len(role.workers)     # when each replica was asked for
        self.gone: list[int | None] = [None] * len(role.workers)   # when it was removed
        self._live = self.peak = self.at_start = len(role.workers)
        # Work a worker owes outside its engine (a P/D handoff: KV held for a transfer, a
        # transfer on its way to it); set by the simulation under disaggregation.
        self.owes_handoff = None
        self.next_sync: int | None = None   # this role's next sync, while armed

    # ------------------------------------------------------------------ accounting

    def replica_ns(self, start: int, end: int) -> int:
        """∫ live replicas dt over [start, end]: each replica's lifetime within it."""
        return sum(self.lifetime_ns(index, start, end) for index in range(len(self.born)))

    def lifetime_ns(self, index: int, start: int, end: int) -> int:
        """How long replica `index` existed within [start, end]."""
        gone = self.gone[index]
        return max(0, min(end, gone if gone is not None else end) - max(start, self.born[index]))

    def _count(self, now: int, delta: int) -> None:
        self._live += delta
        self.peak = max(self.peak, self._live)

    def _set(self, index: int, state: str, now: int) -> None:
        self.states[index] = state
        self.router.ready[index] = state == READY
        self.changes.append([now / 1e9, self.role.workers[index].name, state])

    # ------------------------------------------------------------------ the metric

    def metric_of(self, worker) -> float:
        metric = self.cfg.metric
        if metric == "queue_length":
            return len(worker.scheduler.waiting) + len(worker.intake)
        if metric == "in_flight":
            return len(worker.requests())
        kv = worker.scheduler.kv
        return kv.num_used / kv.num_usable

    # ------------------------------------------------------------------ the sync loop

    def sync(self, now: int, add_worker) -> list[int]:
        """One HPA sync at `now`; returns the indices of replicas it asked for. `add_worker()`
        appends a fresh worker to the role (and its router) and returns its index."""
        ready = [w for w, state in zip(self.role.workers, self.states) if state == READY]
        current = sum(state in (PROVISIONING, READY) for state in self.states)
        average, applied = self.recommend(now, ready, current)
        self.timeline.append([now / 1e9, self._live, len(ready), average, applied])
        added = []
        for _ in range(applied - current):
            index = add_worker()
            self.states.append(PROVISIONING)
            self.born.append(now)
            self.gone.append(None)
            self._count(now, 1)
            self._set(index, PROVISIONING, now)
            added.append(index)
        if applied < current:
            self._scale_down(current - applied, now)
        return added

    def recommend(self, now: int, ready: list, current: int) -> tuple[float, int]:
        """The HPA's (metric average over the ready replicas, replicas to apply) at `now`."""
        cfg = self.cfg
        average = sum(self.metric_of(w) for w in ready) / len(ready)
        ratio = average / cfg.target
        desired = current if abs(ratio - 1.0) <= cfg.tolerance else math.ceil(len(ready) * ratio)
        desired = min(max(desired, cfg.min_replicas), cfg.max_replicas, max(2 * current, current + 4))
        recommendations = self.recommendations
        recommendations.append((now, desired))
        while recommendations[0][0] < now - self.window_ns:
            recommendations.popleft()
        applied = desired if desired >= current else min(current, max(d for _, d in recommendations))
        return average, applied

    def on_ready(self, index: int, now: int) -> None:
        if self.states[index] == PROVISIONING:
            self._set(index, READY, now)

    def _scale_down(self, count: int, now: int) -> None:
        order = sorted(range(len(self.states)),
                       key=lambda i: (self.states[i] != PROVISIONING, -i))
        for index in order:
            if count == 0:
                break
            if self.states[index] == PROVISIONING:
                self._remove(index, now)
            elif self.states[index] == READY:
                self._set(index, DRAINING, now)
                self.maybe_remove(index, now)
            else:
                continue
            count -= 1

    def maybe_remove(self, index: int, now: int) -> None:
        """Remove a draining replica once it holds nothing and nothing is on its way to it."""
        worker = self.role.workers[index]
        if (self.states[index] == DRAINING and worker.executing is None and not worker.requests()
                and worker.next_engine_arrival() is None
                and (self.owes_handoff is None or not self.owes_handoff(worker))):
            self._remove(index, now)

    def _remove(self, index: int, now: int) -> None:
        self._set(index, REMOVED, now)
        self.gone[index] = now
        self._count(now, -1)

    def draining(self) -> list[int]:
        return [i for i, state in enumerate(self.states) if state == DRAINING]

    def describe(self) -> dict:
        return {"metric": self.cfg.metric, "target": self.cfg.target}

    def summary(self, start: int, end: int) -> dict:
        """summary.json's `autoscaling.<role>`; GPU-hours over [start, end], the run's window."""
        replica_ns = self.replica_ns(start, end)
        return {
            **self.describe(), "replicas_at_start": self.at_start,
            "provisioning_s": self.provision_ns / 1e9,
            "replica_hours": replica_ns / 3.6e12,
            "gpu_hours": replica_ns * self.gpus_per_replica / 3.6e12,
            "peak_replicas": self.peak,
            "timeline": self.timeline,
            "changes": self.changes,
        }
