"""Per-job metrics of an agentic trace (format agentic-mooncake): jobs.csv, summary.json's
`agentic_jobs` block and the printed table's lines.

A job is a set of requests linked by `wait_for`. Its makespan runs from its first request's
arrival to its last token reaching the user. Its critical path is the chain that gated the
end: from the request that finished last, back through the request each one waited on that
finished last (ties to the lower request id), to a root. The path's serving time sums its
requests' arrival-to-last-token times; the rest of the makespan (delays, tool waits, a
semaphore) is its wait. A job is complete when every request was sent and served.
"""

from __future__ import annotations

from typing import TextIO

import numpy as np

from servesim.metrics.records import _NONE, RequestTable, _ms

JOB_COLUMNS = ("job_id", "requests", "sent", "completed", "start_ms", "end_ms", "makespan_ms", "critical_path",
               "critical_path_requests", "critical_path_serving_ms", "critical_path_wait_ms")
_REJECTED = 2   # records.STATUSES index


def _components(requests) -> list[int]:
    """Each request's job: the lowest request id it is linked to (union-find over wait_for)."""
    root = list(range(len(requests)))

    def find(i: int) -> int:
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i

    for request in requests:
        for parent in request.parents or ():
            a, b = find(parent), find(request.request_id)
            root[max(a, b)] = min(a, b)
    return [find(i) for i in range(len(requests))]


class JobTable:
    def __init__(self, records: RequestTable, requests) -> None:
        self._requests = requests
        n = len(requests)
        self._arrival = np.full(n, _NONE, dtype=np.int64)
        self._finish = np.full(n, _NONE, dtype=np.int64)
        self._served = np.zeros(n, dtype=bool)
        ids = records.column("request_id")
        self._arrival[ids] = records.column("arrival_ns")
        self._finish[ids] = records.column("finish_ns")
        self._served[ids] = records.column("status") != _REJECTED
        owner = _components(requests)
        jobs: dict[int, list[int]] = {}
        for i, job in enumerate(owner):
            jobs.setdefault(job, []).append(i)
        self.jobs = [jobs[key] for key in sorted(jobs)]
        self.rows = [self._row(members) for members in self.jobs]

    def _critical_path(self, members: list[int]) -> list[int]:
        finish = self._finish
        last = max((i for i in members if finish[i] != _NONE), key=lambda i: (finish[i], -i))
        path = [last]
        while self._requests[path[-1]].parents:
            path.append(max(self._requests[path[-1]].parents, key=lambda i: (finish[i], -i)))
        return path[::-1]

    def _row(self, members: list[int]) -> dict:
        sent = [i for i in members if self._arrival[i] != _NONE]
        complete = len(sent) == len(members) and bool(self._served[members].all())
        start = int(self._arrival[sent].min())
        end = int(self._finish[sent].max())
        path = self._critical_path(members) if complete else []
        serving = int(sum(int(self._finish[i] - self._arrival[i]) for i in path))
        return {"requests": len(members), "sent": len(sent), "completed": complete, "start": start, "end": end,
                "path": path, "serving": serving if complete else None,
                "wait": end - start - serving if complete else None}

    def _name(self, i: int) -> str:
        return self._requests[i].trace_id or str(i)

    def write_csv(self, fh: TextIO) -> None:
        fh.write(",".join(JOB_COLUMNS) + "\n")
        for job, row in enumerate(self.rows):
            done = row["completed"]
            cells = (str(job), str(row["requests"]), str(row["sent"]), str(done).lower(), _ms(row["start"]),
                     _ms(row["end"]), _ms(row["end"] - row["start"]) if done else "",
                     ";".join(self._name(i) for i in row["path"]), str(len(row["path"])) if done else "",
                     _ms(row["serving"]), _ms(row["wait"]))
            fh.write(",".join(cells) + "\n")

    def summary(self) -> dict:
        done = [row for row in self.rows if row["completed"]]
        makespans = np.array([(row["end"] - row["start"]) / 1e6 for row in done])

        def stat(fn) -> float | None:
            return float(fn(makespans)) if len(makespans) else None

        return {
            "num_jobs": len(self.rows),
            "completed_jobs": len(done),
            "mean_makespan_ms": stat(np.mean),
            "median_makespan_ms": stat(np.median),
            "p90_makespan_ms": stat(lambda m: np.percentile(m, 90)),
            "p99_makespan_ms": stat(lambda m: np.percentile(m, 99)),
            "mean_critical_path_requests": float(np.mean([len(r["path"]) for r in done])) if done else None,
            "mean_critical_path_wait_ms": float(np.mean([r["wait"] / 1e6 for r in done])) if done else None,
        }


def job_rows(summary: dict) -> list[tuple[str, str] | str]:
    """The printed table's agentic-job lines (metrics/table.py), when the run had them."""
    block = summary.get("agentic_jobs")
    if block is None:
        return []

    def seconds(value) -> str:
        return "n/a" if value is None else f"{value / 1e3:,.2f}"

    return [
        "Agentic jobs",
        ("Jobs (complete / all)", f"{block['completed_jobs']:,} / {block['num_jobs']:,}"),
        ("Mean job makespan (s)", seconds(block["mean_makespan_ms"])),
        ("P99 job makespan (s)", seconds(block["p99_makespan_ms"])),
        ("Mean critical path (requests)", "n/a" if block["mean_critical_path_requests"] is None
         else f"{block['mean_critical_path_requests']:,.2f}"),
        ("Mean critical path wait (s)", seconds(block["mean_critical_path_wait_ms"])),
    ]
