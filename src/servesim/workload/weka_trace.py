"""Weka agentic coding traces (`weka-trace`): the format InferenceX's AgentX corpus is in.

SemiAnalysis' `cc-traces-weka` data, replayed through aiperf, is one JSON object per
trace file (ai-dynamo/aiperf `src/aiperf/dataset/loader/weka_trace_models.py` `WekaTrace`,
read by `weka_trace.py` `WekaTraceLoader`, 2026 main branch):

    {"id", "models", "block_size", "hash_id_scope": "local", "tool_tokens"?, "system_tokens"?,
     "totals"?, "requests": [request | subagent, ...]}
    request  (type "n" or "s"): {"t" (s), "type", "model", "in", "out", "hash_ids"?, "input_types"?,
              "output_types"?, "stop"?, "api_time"? (s), "think_time"? (s), "ttft"? (type "s" only)}
    subagent (type "subagent"): {"t", "type", "agent_id", "subagent_type", "status", "models",
              "requests": [request, ...], "duration_ms"?, "total_tokens"?, "tool_use_count"?,
              "tool_tokens"?, "system_tokens"?}

Replayed here as requests with dependencies (the `agentic-mooncake` machinery), token
counts only, timed as aiperf's loader times them where it is simple to state:

- The outer requests are the main agent's chain: its first is a root, sent at its `t`
  (open loop; re-timed by poisson or bench); each later one is sent when the one before
  has reached the user plus the recorded idle gap, `t_k - (t_{k-1} + api_time_{k-1})`
  clamped at 0 (aiperf's `_end_to_start_delay_ms`: the gap between starts less the
  server's time).
- A subagent's requests are a chain spawned by the main request before its marker: the
  first waits on that request plus the gap from its recorded end; inner `t` before the
  spawn time are relative to it (aiperf's `_subagent_request_absolute_t`). The first
  later main request whose `t` is at or after the subagent's recorded end (`t` +
  `duration_ms`, else its last request's end: aiperf's `_sa_end_seconds`) waits on it
  too: a fan-in. A subagent ending after the last main request is waited on by none.
- `hash_ids` are blocks of the trace's `block_size` tokens, which must be
  `workload.trace_block_size`; `out` 0 is sent as 1 (aiperf's `max_tokens` is at least 1).

Not modelled: aiperf's splitting of a subagent's requests into parallel chains by shared
hash-id prefixes, its idle-gap compression, its cross-stream predecessor inference,
`think_time`, `ttft`, models and content types (read and checked, then unused). A folder
of trace files is not read: one file is one trace. Unknown fields are refused naming the
request's place in the file (`requests[3].requests[1]`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from servesim.limits import check_tokens
from servesim.workload.trace import ENCODING, NS_PER_S, TraceError, TraceRequest, hash_ids_of

FORMAT = "weka-trace"
TRACE_KEYS = {"id", "models", "block_size", "hash_id_scope", "tool_tokens", "system_tokens", "requests", "totals"}
REQUEST_KEYS = {"t", "type", "model", "in", "out", "hash_ids", "input_types", "output_types", "stop", "api_time",
                "think_time"}
SUBAGENT_KEYS = {"t", "type", "agent_id", "subagent_type", "duration_ms", "total_tokens", "tool_use_count",
                 "status", "requests", "models", "tool_tokens", "system_tokens"}
_JOIN_EPSILON_S = 1e-6   # aiperf's tolerance when comparing recorded times


def load_weka(path: Path) -> dict:
    try:
        with open(path, encoding=ENCODING) as fh:
            trace = json.load(fh)
    except json.JSONDecodeError as err:
        raise TraceError(f"{path} line {err.lineno}: invalid JSON ({err.msg})") from None
    except RecursionError:
        raise TraceError(f"{path}: invalid JSON (nested too deeply)") from None
    if not isinstance(trace, dict):
        raise TraceError(f"{path}: a {FORMAT} file is one JSON object (a trace), not a {type(trace).__name__}")
    _keys(trace, TRACE_KEYS, f"{path}", "the trace")
    for key in ("id", "models", "block_size", "hash_id_scope", "requests"):
        if key not in trace:
            raise TraceError(f"{path}: the trace needs {key!r}")
    if trace["hash_id_scope"] != "local":
        raise TraceError(f"{path}: hash_id_scope must be 'local' (as aiperf reads it), got {trace['hash_id_scope']!r}")
    block = trace["block_size"]
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise TraceError(f"{path}: block_size must be a positive integer, got {block!r}")
    if not isinstance(trace["requests"], list):
        raise TraceError(f"{path}: requests must be a list")
    return trace


def check_block_size(path: Path, trace_block_size: int) -> None:
    block = load_weka(path)["block_size"]
    if block != trace_block_size:
        raise TraceError(f"{path}: the trace's hash_ids are blocks of {block} tokens; set workload.trace_block_size "
                         f"to {block} (it is {trace_block_size})")


def read_weka_trace(path: Path, limit: int | None) -> list[TraceRequest]:
    trace = load_weka(path)
    return _Builder(path, str(trace["id"]), limit).build(trace["requests"])


def _keys(obj: dict, allowed: set[str], where: str, what: str) -> None:
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise TraceError(f"{where}: unknown field {unknown[0]!r} for {what} in format {FORMAT}")


def _seconds(obj: dict, key: str, where: str, required: bool = False) -> float | None:
    value = obj.get(key)
    if value is None:
        if required:
            raise TraceError(f"{where}: {key} is required")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise TraceError(f"{where}: {key} must be a non-negative number of seconds, got {value!r}")
    if value > 1e9:
        raise TraceError(f"{where}: {key} of {value:g} s is past servesim's clock")
    return float(value)


def _tokens(obj: dict, key: str, where: str, minimum: int) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise TraceError(f"{where}: {key} must be an integer of at least {minimum}, got {value!r}")
    check_tokens(value, f"{where}: {key}")
    return value


def _ns(seconds: float) -> int:
    return round(seconds * NS_PER_S)


class _Builder:
    """Walks the outer list once, linking each request to what it waits on."""

    def __init__(self, path: Path, trace_id: str, limit: int | None) -> None:
        self.path, self.trace_id, self.limit = path, trace_id, limit
        self.out: list[TraceRequest] = []
        self.main: tuple[int, float] | None = None          # the main chain's last request: id, recorded end
        self.pending: list[tuple[int | None, float]] = []    # subagents not joined yet: last request, end

    def build(self, requests: list) -> list[TraceRequest]:
        for index, entry in enumerate(requests):
            where = f"{self.path} requests[{index}]"
            if not isinstance(entry, dict):
                raise TraceError(f"{where}: expected a JSON object")
            kind = entry.get("type")
            if kind == "subagent":
                self._subagent(entry, where)
            elif kind in ("n", "s"):
                self._main_request(entry, where)
            else:
                raise TraceError(f"{where}: type must be 'n', 's' or 'subagent', got {kind!r}")
            if self.limit is not None and len(self.out) >= self.limit:
                return self.out[:self.limit]
        return self.out

    def _main_request(self, entry: dict, where: str) -> None:
        start = _seconds(entry, "t", where, required=True)
        joined = [p for p in self.pending if p[1] <= start + _JOIN_EPSILON_S]
        self.pending = [p for p in self.pending if p[1] > start + _JOIN_EPSILON_S]
        before = ([self.main] if self.main else []) + joined
        parents = [rid for rid, _ in before if rid is not None]
        ready = max((end for _, end in before), default=None)
        rid = self._add(entry, where, self.trace_id, start, parents, ready)
        self.main = (rid, start + (_seconds(entry, "api_time", where) or 0.0))

    def _subagent(self, entry: dict, where: str) -> None:
        _keys(entry, SUBAGENT_KEYS, where, "a subagent")
        spawn = _seconds(entry, "t", where, required=True)
        inner = entry.get("requests")
        if not isinstance(inner, list):
            raise TraceError(f"{where}: a subagent's requests must be a list")
        session = f"{self.trace_id}::sa:{entry.get('agent_id')}"
        previous = self.main
        last_end = spawn
        for index, request in enumerate(inner):
            at = f"{where}.requests[{index}]"
            if not isinstance(request, dict) or request.get("type") not in ("n", "s"):
                raise TraceError(f"{at}: a subagent's request is an object of type 'n' or 's'")
            start = _seconds(request, "t", at, required=True)
            if start + _JOIN_EPSILON_S < spawn:   # relative to the spawn (older captures)
                start += spawn
            parents = [previous[0]] if previous else []
            rid = self._add(request, at, session, start, parents, previous[1] if previous else None)
            previous = (rid, start + (_seconds(request, "api_time", at) or 0.0))
            last_end = max(last_end, previous[1])
        duration = entry.get("duration_ms")
        if duration is not None:
            if isinstance(duration, bool) or not isinstance(duration, (int, float)) or not math.isfinite(duration):
                raise TraceError(f"{where}: duration_ms must be a number, got {duration!r}")
            last_end = spawn + max(duration, 0) / 1000
        self.pending.append((previous[0] if inner else None, last_end))

    def _add(self, entry: dict, where: str, session: str, start: float, parents: list[int],
             ready: float | None) -> int:
        _keys(entry, REQUEST_KEYS | ({"ttft"} if entry.get("type") == "s" else set()), where, "a request")
        _seconds(entry, "api_time", where)
        hash_ids = hash_ids_of(entry.get("hash_ids", []), where)
        rid = len(self.out)
        parents = tuple(dict.fromkeys(parents))
        self.out.append(TraceRequest(
            request_id=rid, arrival_ns=None if parents else _ns(start),
            input_length=_tokens(entry, "in", where, 1), output_length=max(_tokens(entry, "out", where, 0), 1),
            hash_ids=tuple(hash_ids) or None, session_id=session, trace_id=where.rsplit(" ", 1)[-1],
            delay_ns=_ns(max(start - ready, 0.0)) if parents else None, parents=parents or None))
        return rid
