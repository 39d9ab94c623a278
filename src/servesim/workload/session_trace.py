"""Multi-turn traces: Mooncake JSON lines with sessions (`mooncake-sessions`).

The rows of aiperf's `mooncake_trace` dataset in its multi-turn form (ai-dynamo/aiperf,
src/aiperf/dataset/loader/models.py `MooncakeTrace`) and of Dynamo's Mooncake replay
(ai-dynamo/dynamo lib/mocker/src/loadgen/types.rs `MooncakeRow`, trace.rs
`Trace::from_mooncake`, 2026 main branch): each line is `{"input_length",
"output_length", "hash_ids"?, "session_id"?, "request_id"?, "timestamp"?, "delay"?}`.
Lines that share a `session_id` are one session's turns, in file order; a line without
one is a session of its own. A session's first turn is sent at its `timestamp` (ms; by the
client: open loop at the time, poisson or bench re-timed) and may carry no delay but 0.
Each later turn is sent a delay after the turn before it reached the user: its `delay`
(ms), else, as Dynamo reads it, its `timestamp` minus the session's last timestamp
before it, else 0. `hash_ids` say what a turn's prompt shares, as in `mooncake`; a
response's own tokens are shared only through them. A rejected turn ends its session.

aiperf's text inputs (`text_input`, `messages`, `payload`) carry no token counts, and
Dynamo's `priority`, `strict_priority`, `policy_class` and `output_token_ids` are not
modelled: they are refused like any unknown field, naming the line.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from servesim.workload.clients import Client
from servesim.workload.sessions import SessionLog, first_turn_client
from servesim.workload.trace import (ENCODING, TraceError, TraceRequest, _json_int, hash_ids_of, json_row,
                                     milliseconds_ns)

KEYS = {"timestamp", "input_length", "output_length", "hash_ids", "session_id", "request_id", "delay"}


def _row(line: str, where: str, keys: set[str] | None = None, fmt: str = "mooncake-sessions") -> dict:
    return json_row(line, where, KEYS if keys is None else keys, fmt)


def _text(row: dict, name: str, where: str) -> str | None:
    value = row.get(name)
    if value is not None and (not isinstance(value, str) or not value):
        raise TraceError(f"{where}: {name} must be a non-empty string, got {value!r}")
    return value


def _delay(session: str, delay: int | None, timestamp: int | None, last: dict[str, int | None], where: str) -> int:
    """A later turn's delay after the turn before: given, or from the session's timestamps."""
    if delay is not None:
        return delay
    if timestamp is None:
        return 0
    before = last.get(session)
    if before is None:
        raise TraceError(f"{where}: a later turn of session {session!r} has a timestamp but no delay, and no "
                         "turn before it a timestamp to count the delay from")
    if timestamp < before:
        raise TraceError(f"{where}: the timestamp of this turn of session {session!r} is earlier than the turn "
                         "before it")
    return timestamp - before


def read_session_trace(path: Path, limit: int | None) -> list[TraceRequest]:
    """The trace's turns in file order; `delay_ns` is set on every turn after a session's first."""
    out: list[TraceRequest] = []
    last: dict[str, int | None] = {}   # sessions seen: their latest timestamp
    with open(path, encoding=ENCODING) as fh:
        for line_no, line in enumerate(fh, 1):
            if limit is not None and len(out) >= limit:
                break
            line = line.strip()
            if not line:
                continue
            where = f"{path} line {line_no}"
            row = _row(line, where)
            session = _text(row, "session_id", where)
            later = session is not None and session in last
            timestamp, delay = milliseconds_ns(row, "timestamp", where), milliseconds_ns(row, "delay", where)
            if not later and delay:
                raise TraceError(f"{where}: the first turn of a session has a delay; it is sent at its "
                                 "timestamp (or by the client)")
            after = _delay(session, delay, timestamp, last, where) if later else None
            if session is not None and (timestamp is not None or not later):
                last[session] = timestamp if timestamp is not None else last.get(session)
            out.append(TraceRequest(
                request_id=len(out), arrival_ns=None if later else timestamp,
                input_length=_json_int(row.get("input_length"), "input_length", where),
                output_length=_json_int(row.get("output_length"), "output_length", where),
                hash_ids=hash_ids_of(row.get("hash_ids"), where), session_id=session,
                trace_id=_text(row, "request_id", where),
                delay_ns=after))
    return out


def _log(requests: list[TraceRequest]) -> SessionLog:
    """Sessions numbered by their first line; turns by their order in the session."""
    index: dict[tuple[str, object], int] = {}
    turns: list[int] = []
    log = SessionLog(turns)
    for request in requests:
        key = ("session", request.session_id) if request.session_id is not None else ("alone", request.request_id)
        session = index.get(key)
        if session is None:
            session = index[key] = len(turns)
            turns.append(0)
        log.session_of.append(session)
        log.turn_of.append(turns[session])
        turns[session] += 1
    log.started = len(turns)
    return log


def delay_scale(client_cfg) -> float:
    """What a trace's delays after a predecessor are multiplied by: an open loop's `time_scale`,
    as aiperf's fixed-schedule replay scales them by 1 / its speed-up
    (src/aiperf/timing/strategies/fixed_schedule.py `_dispatch_by_timing`); 1 for other clients."""
    return getattr(client_cfg, "time_scale", 1.0) if client_cfg.mode == "open_loop" else 1.0


def scaled(delay_ns: int, scale: float) -> int:
    return delay_ns if scale == 1.0 else round(delay_ns * scale)


class FollowUpTraceClient(Client):
    """A trace whose first requests the configured client sends and whose others follow requests
    that finished (`follow_ups`, in the subclass): the first ones' client is wrapped, its
    admission hook passed on, and delays after a predecessor scaled as `delay_scale` says."""

    def _send_first(self, firsts: list[TraceRequest], client_cfg, root_seed: int) -> None:
        self._scale = delay_scale(client_cfg)
        self._inner = first_turn_client(client_cfg, firsts, root_seed, len(firsts))
        admit = getattr(self._inner, "admit", None)
        if admit is not None:   # the simulation looks the hook up: set only when there is one
            self.admit = admit

    def initial(self) -> Iterator[tuple[int, TraceRequest]]:
        return self._inner.initial()

    def on_complete(self, time_ns: int) -> TraceRequest | None:
        return self._inner.on_complete(time_ns)


class TraceSessionClient(FollowUpTraceClient):
    """A session trace's first turns by the client; each later turn its delay after the one before."""

    def __init__(self, requests: list[TraceRequest], client_cfg, root_seed: int) -> None:
        self._next: dict[int, TraceRequest] = {}
        last: dict[str, int] = {}
        firsts = []
        for request in requests:
            if request.delay_ns is None:
                firsts.append(request)
            else:
                self._next[last[request.session_id]] = request
            if request.session_id is not None:
                last[request.session_id] = request.request_id
        self.session_log = _log(requests)
        self._send_first(firsts, client_cfg, root_seed)

    def follow_ups(self, request_id: int, outputs: int, rejected: bool,
                   time_ns: int) -> list[tuple[int, TraceRequest]]:
        nxt = self._next.pop(request_id, None)
        if nxt is None or rejected:
            return []
        return [(time_ns + scaled(nxt.delay_ns, self._scale), nxt)]
