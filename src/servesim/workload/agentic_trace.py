"""Agentic traces: requests that wait on others (`agentic-mooncake`).

The row form AISimulate and Dynamo's replay read as `agentic_mooncake` (ai-dynamo/dynamo
lib/mocker/src/loadgen/types.rs `TraceFileFormat::AgenticMooncake`: "each row dispatches
after `wait_for` completions plus its authored delay/tool wait"; the request-trace
converter writes the gap after the last dependency as `delay` plus `tool_wait_ms`; 2026
main branch): each line is `{"request_id", "input_length", "output_length", "hash_ids"?,
"session_id"?, "timestamp"?, "wait_for"?, "delay"?, "tool_wait_ms"?}`.

- A row without `wait_for` is a root: sent at its `timestamp` (ms) by the client (open
  loop at the time; poisson or bench re-timed). It takes no delay.
- A row with `wait_for` (request ids of earlier lines) is sent when the last of them has
  reached the user plus `delay` + `tool_wait_ms` (ms, default 0): fan-out is several rows
  waiting on one, fan-in one row waiting on several. It takes no timestamp.
- A request never sent because one it waits on was rejected leaves its job incomplete.

A job is a set of requests linked by `wait_for` (a connected component), numbered by its
first line; `session_id` is kept but does not group. Unknown fields (Dynamo's priority and
policy keys, an agentic header row's) are refused naming the line, as is a `wait_for` that
names no earlier line (which also rules out cycles).
"""

from __future__ import annotations

from pathlib import Path

from servesim.workload.session_trace import FollowUpTraceClient, _row, _text, scaled
from servesim.workload.trace import (ENCODING, TraceError, TraceRequest, _json_int, hash_ids_of,
                                     milliseconds_ns)

KEYS = {"request_id", "input_length", "output_length", "hash_ids", "session_id", "timestamp", "wait_for", "delay",
        "tool_wait_ms"}


def _wait_for(row: dict, index: dict[str, int], where: str) -> tuple[int, ...]:
    names = row.get("wait_for")
    if names is None:
        return ()
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise TraceError(f"{where}: wait_for must be a non-empty list of request ids (strings)")
    parents = []
    for name in names:
        if name not in index:
            raise TraceError(f"{where}: wait_for names {name!r}, which no earlier line's request_id is")
        parents.append(index[name])
    return tuple(dict.fromkeys(parents))


def read_agentic_trace(path: Path, limit: int | None) -> list[TraceRequest]:
    """The trace's requests in file order; a dependent one has `parents` and `delay_ns`."""
    out: list[TraceRequest] = []
    index: dict[str, int] = {}
    with open(path, encoding=ENCODING) as fh:
        for line_no, line in enumerate(fh, 1):
            if limit is not None and len(out) >= limit:
                break
            line = line.strip()
            if not line:
                continue
            where = f"{path} line {line_no}"
            row = _row(line, where, KEYS, "agentic-mooncake")
            name = _text(row, "request_id", where)
            if name is None:
                raise TraceError(f"{where}: request_id is required")
            if name in index:
                raise TraceError(f"{where}: request_id {name!r} is on an earlier line too")
            parents = _wait_for(row, index, where)
            timestamp = milliseconds_ns(row, "timestamp", where)
            waits = [milliseconds_ns(row, key, where) for key in ("delay", "tool_wait_ms")]
            if parents and timestamp is not None:
                raise TraceError(f"{where}: a row with wait_for is sent after what it waits for; it takes no "
                                 "timestamp")
            if not parents and any(w is not None for w in waits):
                raise TraceError(f"{where}: a row without wait_for is sent at its timestamp; it takes no delay "
                                 "or tool_wait_ms")
            index[name] = len(out)
            out.append(TraceRequest(
                request_id=len(out), arrival_ns=timestamp,
                input_length=_json_int(row.get("input_length"), "input_length", where),
                output_length=_json_int(row.get("output_length"), "output_length", where),
                hash_ids=hash_ids_of(row.get("hash_ids"), where), session_id=_text(row, "session_id", where),
                trace_id=name,
                delay_ns=sum(w or 0 for w in waits) if parents else None, parents=parents or None))
    return out


class AgenticClient(FollowUpTraceClient):
    """Roots by the client; each other request when its last parent is done, plus its delay."""

    def __init__(self, requests: list[TraceRequest], client_cfg, root_seed: int) -> None:
        self._requests = requests
        self._children: dict[int, list[int]] = {}
        self._waiting = {r.request_id: len(r.parents) for r in requests if r.parents}
        self._ready_at: dict[int, int] = {}
        for request in requests:
            for parent in request.parents or ():
                self._children.setdefault(parent, []).append(request.request_id)
        self._send_first([r for r in requests if not r.parents], client_cfg, root_seed)

    def follow_ups(self, request_id: int, outputs: int, rejected: bool,
                   time_ns: int) -> list[tuple[int, TraceRequest]]:
        if rejected:
            return []   # what waits on it is never sent
        sent = []
        for child in self._children.get(request_id, ()):
            self._ready_at[child] = max(self._ready_at.get(child, time_ns), time_ns)
            self._waiting[child] -= 1
            if not self._waiting[child]:
                request = self._requests[child]
                sent.append((self._ready_at.pop(child) + scaled(request.delay_ns, self._scale), request))
        return sent
