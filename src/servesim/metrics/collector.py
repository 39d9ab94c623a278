"""Turns pass outputs into per-request timestamps, ITL samples, records and the pass log."""

from __future__ import annotations

import json
from array import array
from typing import TextIO

import numpy as np

from servesim.engine.passes import LogicalPass, PassResult
from servesim.engine.request import Request
from servesim.metrics.histogram import LogHistogram
from servesim.metrics.records import RequestTable


def _ms(ns: int) -> float:
    return round(ns / 1e6, 6)


class Collector:
    def __init__(self, pass_log: TextIO | None = None, warmup: int = 0, token_times: bool = False) -> None:
        self.itl = LogHistogram()   # inter-token gaps of measured requests (warm-up ones left out)
        # Output deliveries (streamed chunks) to measured requests, for vllm bench's peak output
        # rate: pass ends and counts. A fast-forwarded run of passes is kept as its last end,
        # step count, deliveries per step and its gap (uniform) or step durations (varied),
        # in flat arrays: a run is often a handful of passes, where a numpy call per run
        # costs more than the run.
        self._delivery_ns = array("q")
        self._delivery_n = array("q")
        self._uniform_runs = array("q")    # end, steps, count, gap; per run
        self._varied_runs = array("q")     # end, steps, count; per run
        self._varied_durations = array("q")
        # Every measured request's delivery times (`--save-detailed`), read off each result's
        # logical passes (engine/passes.py), which name every request.
        self.token_times: dict[int, array] | None = {} if token_times else None
        self.warmup = warmup
        self.records = RequestTable()
        self.pass_log = pass_log
        self.num_passes = 0
        self.num_preemptions = 0
        self.peak_running = 0
        self.workers: dict[str, WorkerStats] = {}

    @property
    def names_requests(self) -> bool:
        """Does it need every pass's requests by name (a pass log, token times)?"""
        return self.pass_log is not None or self.token_times is not None

    def on_pass(self, worker, done: PassResult) -> None:
        end = done.end_ns
        itl = self.itl
        warmup = self.warmup
        # Most requests delivered by a pass got their previous token from the same pass: count
        # the gaps first and add each distinct one once.
        gaps: dict[int, int] = {}
        delivered = 0   # measured requests' tokens (first ones, and the later ones counted in gaps)
        for request in done.delivered:
            if request.first_token_ns is None:
                request.first_token_ns = end
                if request.request_id >= warmup:
                    delivered += 1
            elif request.request_id >= warmup:
                gap = end - request.last_token_ns
                gaps[gap] = gaps.get(gap, 0) + 1
                delivered += 1
            request.last_token_ns = end
        if gaps:
            for gap, count in gaps.items():
                itl.add(gap, count)
        run = done.run
        steps = 1 if run is None else run.steps - run.early_steps   # the passes it reports
        # Tokens delivered in aggregate, to requests the result does not name.
        measured = done.aggregate
        if measured:
            done.token_gaps(itl)
            if steps > 1:
                if run.durations is None:
                    self._uniform_runs.extend((end, steps, measured, run.gap_ns))
                else:
                    self._varied_runs.extend((end, steps, measured))
                    self._varied_durations.extend(run.durations)
            else:
                delivered += measured
        if delivered:
            self._delivery_ns.append(end)
            self._delivery_n.append(delivered)
        for request in done.finished:
            request.finish_ns = end
        scheduled = done.scheduled
        self.num_passes += steps
        self.num_preemptions += len(scheduled.preempted)
        batch = len(scheduled.entries) + scheduled.group_size
        if batch > self.peak_running:
            self.peak_running = batch
        stats = self.workers[worker.name]
        stats.passes += steps
        stats.requests += batch * steps
        stats.tokens += scheduled.num_tokens
        stats.preemptions += len(scheduled.preempted)
        stats.sample(end, worker.scheduler.kv.num_used if done.kv_used < 0 else done.kv_used, batch)
        if run is not None and run.kv_peak > stats.kv_max:
            stats.kv_max = run.kv_peak
        if self.pass_log is not None or self.token_times is not None:
            self._name_requests(worker.name, done)

    def _name_requests(self, worker_name: str, done: PassResult) -> None:
        """The pass log's lines and the token times, one logical pass at a time."""
        times = self.token_times
        log = self.pass_log
        warmup = self.warmup
        for logical in done.logical_passes():
            if times is not None:
                for request in logical.delivered:
                    if request.request_id >= warmup:
                        times.setdefault(request.request_id, array("q")).append(logical.end_ns)
            if log is not None:
                log.write(json.dumps(self.pass_record(worker_name, logical)) + "\n")

    def deliveries(self) -> tuple[np.ndarray, np.ndarray]:
        """(time ns, count) of every output delivery to a measured request, unordered."""
        times = [np.frombuffer(self._delivery_ns, dtype=np.int64)]
        counts = [np.frombuffer(self._delivery_n, dtype=np.int64)]
        if self._uniform_runs:
            end, steps, count, gap = np.frombuffer(self._uniform_runs, dtype=np.int64).reshape(-1, 4).T
            run, back = _steps_from_last(steps)
            times.append(end[run] - gap[run] * back)
            counts.append(count[run])
        if self._varied_runs:
            end, steps, count = np.frombuffer(self._varied_runs, dtype=np.int64).reshape(-1, 3).T
            run, _ = _steps_from_last(steps)
            through = np.cumsum(np.frombuffer(self._varied_durations, dtype=np.int64))
            # A pass ends its run's last end less the durations of the run's passes after it.
            after = through[np.cumsum(steps) - 1][run] - through
            times.append(end[run] - after)
            counts.append(count[run])
        return np.concatenate(times), np.concatenate(counts)

    @staticmethod
    def pass_record(worker_name: str, logical: LogicalPass) -> dict:
        """A pass log line (docs/outputs.md)."""
        return {
            "worker": worker_name,
            "pass": logical.index,
            "start_ms": _ms(logical.start_ns),
            "end_ms": _ms(logical.end_ns),
            "scheduled": {str(request_id): tokens for request_id, tokens in logical.scheduled},
            "preempted": logical.preempted,
            "finished": logical.finished,
            "free_blocks": logical.free_blocks,
            "prefix_hits": {str(request_id): before for request_id, before in logical.prefix_hits},
        }

    def register(self, workers) -> None:
        """Workers in fleet order (summary rows follow it)."""
        for worker in workers:
            self.workers[worker.name] = WorkerStats(worker)
            if self.names_requests:
                worker.keep_pass_details()

    def on_request_done(self, request: Request) -> None:
        self.records.append(request)

    def worker_summaries(self, sim_ns: int) -> list[dict]:
        """Per-worker figures for summary.json and workers.csv, in fleet order."""
        table = self.records
        names = table.workers
        worker_col = table.column("worker")
        cached = table.column("cached_tokens")
        prompt = table.column("input_length")
        status = table.column("status")
        out = []
        prefill_col = table.column("prefill_worker")
        for stats in self.workers.values():
            if stats.name not in names or stats.role == "decode":
                mine = None   # a decode worker's prompts come with their KV: its hits show in transfer_bytes
            else:
                # A prefill worker's prompts are the requests it computed for a decode worker.
                column = prefill_col if stats.role == "prefill" else worker_col
                mine = (column == names.index(stats.name)) & (status != 2)
            prompt_tokens = int(prompt[mine].sum()) if mine is not None else 0
            out.append(stats.summary(sim_ns, int(cached[mine].sum()) if mine is not None else 0, prompt_tokens))
        return out

    def timelines(self) -> dict[str, dict[str, list]]:
        """Each worker's sampled timeline, in fleet order (see `WorkerStats.timeline_columns`)."""
        return {name: stats.timeline_columns() for name, stats in self.workers.items()}


def _steps_from_last(steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For runs of `steps` passes laid end to end: each pass's run, and how many passes of
    that run come after it."""
    run = np.repeat(np.arange(len(steps)), steps)
    first = np.cumsum(steps) - steps
    position = np.arange(int(steps.sum())) - first[run]
    return run, steps[run] - 1 - position


TIMELINE_POINTS = 256


def kv_utilization(kv_weighted: int, kv_max: int, sim_ns: int, usable: int) -> dict[str, float | None]:
    """A worker's mean and peak KV use over `usable` blocks (also a copied sweep trial's, sweep/sharing.py)."""
    return {"kv_utilization_mean": kv_weighted / (sim_ns * usable) if sim_ns and usable else None,
            "kv_utilization_max": kv_max / usable if usable else None}


class WorkerStats:
    """What one worker did: passes, batch sizes, tokens, preemptions, and a sampled timeline.

    The timeline is sampled at pass ends (every pass at first, every 2nd, 4th, ... pass as
    the run grows, so it stays under 2 × TIMELINE_POINTS points). Each point holds the
    instantaneous state (KV blocks in use, requests in the pass just ended, requests
    waiting in the engine) and cumulative counters (tokens computed, passes), so rates
    over any window survive the thinning exactly.
    """

    def __init__(self, worker) -> None:
        self.name = worker.name
        self.role = worker.role
        self.worker = worker
        self.passes = 0
        self.requests = 0      # Σ over passes of the requests in the pass
        self.tokens = 0
        self.preemptions = 0
        self.kv_weighted = 0   # Σ of used blocks × time since the last sample
        self.kv_max = 0
        self.last_ns = 0
        # (time ns, used blocks, requests in the pass, waiting, Σ tokens computed, Σ passes)
        self.timeline: list[tuple[int, int, int, int, int, int]] = []
        self._last_point: tuple | None = None
        self._stride = 1
        self._skipped = 0

    def _point(self, now: int, used_blocks: int, batch: int) -> tuple:
        worker = self.worker
        scheduler = worker.scheduler
        waiting = len(worker.intake) + len(scheduler.waiting) + len(getattr(scheduler, "transferred", ()))
        return (now, used_blocks, batch, waiting, self.tokens, self.passes)

    def sample(self, now: int, used_blocks: int, batch: int = 0) -> None:
        self.kv_weighted += used_blocks * (now - self.last_ns)
        self.last_ns = now
        if used_blocks > self.kv_max:
            self.kv_max = used_blocks
        self._skipped += 1
        if self._skipped < self._stride:
            self._last_point = (now, used_blocks, batch)
            return
        self._skipped = 0
        self._last_point = None
        self.timeline.append(self._point(now, used_blocks, batch))
        if len(self.timeline) >= 2 * TIMELINE_POINTS:
            # Keep every other point: the timeline stays compact however long the run.
            self.timeline = self.timeline[::2]
            self._stride *= 2

    def summary(self, sim_ns: int, cached_tokens: int, prompt_tokens: int) -> dict:
        usable = self.worker.scheduler.kv.num_usable
        return {
            "worker": self.name,
            "role": self.role,
            "passes": self.passes,
            "busy_fraction": self.worker.busy_ns / sim_ns if sim_ns else None,
            "mean_batch_requests": self.requests / self.passes if self.passes else None,
            "mean_tokens_per_pass": self.tokens / self.passes if self.passes else None,
            "preemptions": self.preemptions,
            "prefix_cache_hit_rate": (cached_tokens / prompt_tokens
                                      if prompt_tokens and self.role != "decode" else None),
            **kv_utilization(self.kv_weighted, self.kv_max, sim_ns, usable),
            "kv_timeline": [[round(p[0] / 1e6, 3), round(p[1] / usable, 5)] for p in self.timeline],
        }

    def timeline_columns(self) -> dict[str, list]:
        """The timeline as columns, ending at the worker's last pass (even if thinning skipped it).

        `time_ms`, `kv_utilization` (used / usable blocks), `running` (requests in the pass
        that just ended), `waiting` (arrived, not running), and the cumulative `tokens`
        (prefill + decode computed) and `passes`.
        """
        points = list(self.timeline)
        if self._last_point is not None:
            points.append(self._point(*self._last_point))
        usable = self.worker.scheduler.kv.num_usable or 1
        return {
            "time_ms": [p[0] / 1e6 for p in points],
            "kv_utilization": [p[1] / usable for p in points],
            "running": [p[2] for p in points],
            "waiting": [p[3] for p in points],
            "tokens": [p[4] for p in points],
            "passes": [p[5] for p in points],
        }
