"""Turns pass outputs into per-request timestamps, ITL samples, records and the pass log."""

from __future__ import annotations

import json
from typing import TextIO

import numpy as np

from servesim.engine.passes import ScheduledPass
from servesim.engine.request import Request
from servesim.metrics.histogram import LogHistogram
from servesim.metrics.records import RequestTable


def _ms(ns: int) -> float:
    return round(ns / 1e6, 6)


class Collector:
    def __init__(self, pass_log: TextIO | None = None) -> None:
        self.itl = LogHistogram()
        self.records = RequestTable()
        self.pass_log = pass_log
        self.num_passes = 0
        self.num_preemptions = 0
        self.peak_running = 0

    def on_pass(self, worker, done: ScheduledPass) -> None:
        end = done.end_ns
        itl = self.itl
        for request in done.delivered:
            if request.first_token_ns is None:
                request.first_token_ns = end
            else:
                itl.add(end - request.last_token_ns)
            request.last_token_ns = end
        if done.bulk_deliveries:
            if done.step_durations is None:
                itl.add(done.bulk_gap_ns, done.bulk_deliveries)
            else:  # a fast-forwarded run of passes: each gap is one pass's duration
                durations = done.step_durations
                members = done.bulk_deliveries
                if durations.min() == durations.max():
                    itl.add(int(durations[0]), len(durations) * members)
                else:
                    values, counts = np.unique(durations, return_counts=True)
                    for value, count in zip(values.tolist(), counts.tolist()):
                        itl.add(value, count * members)
        for request in done.finished:
            request.finish_ns = end
        self.num_passes += done.group_steps
        self.num_preemptions += len(done.preempted)
        batch = len(done.entries) + done.group_size
        if batch > self.peak_running:
            self.peak_running = batch
        if self.pass_log is not None:
            self.pass_log.write(json.dumps(self.pass_record(worker.name, done)) + "\n")

    @staticmethod
    def pass_record(worker_name: str, done: ScheduledPass) -> dict:
        return {
            "worker": worker_name,
            "pass": done.index,
            "start_ms": _ms(done.start_ns),
            "end_ms": _ms(done.end_ns),
            "scheduled": {str(e.request.request_id): e.tokens for e in done.entries},
            "preempted": [r.request_id for r in done.preempted],
            "finished": [r.request_id for r in done.finished],
            "free_blocks": done.free_blocks,
            "prefix_hits": {str(e.request.request_id): e.computed_before
                            for e in done.entries if e.kind != "running"},
        }

    def on_request_done(self, request: Request) -> None:
        self.records.append(request)
