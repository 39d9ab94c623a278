"""Request traces: one `TraceRequest` per line of a trace file.

Formats (see docs/config.md):
- `mooncake`: JSONL `{"timestamp": ms, "input_length", "output_length", "hash_ids"}`
  (Mooncake FAST'25 release); `servesim-jsonl` adds optional `request_id`, `session_id`;
  `mooncake-sessions` is aiperf's and Dynamo's multi-turn form (workload/session_trace.py),
  `agentic-mooncake` AISimulate's and Dynamo's requests with dependencies (workload/agentic_trace.py),
  `weka-trace` the agentic coding traces aiperf replays for InferenceX (workload/weka_trace.py).
- `azure`: CSV `TIMESTAMP,ContextTokens,GeneratedTokens` (Azure LLM inference 2023),
  absolute timestamps taken relative to the first row.
- `vidur`: CSV with `num_prefill_tokens,num_decode_tokens` and optionally `arrived_at`
  (seconds), as in Vidur's processed traces.
Request ids are the 0-based index of the request among the trace's data lines.

Files are UTF-8; a leading byte-order mark is dropped. Times must fit servesim's
integer-nanosecond clock and lengths `servesim.limits` (an error names the line).
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from servesim.errors import ServesimError
from servesim.limits import MAX_HASH_IDS, MAX_REQUEST_TOKENS, MAX_TIME_MS, check_time_ms, check_tokens

# The encoding every trace is read with: UTF-8, a leading byte-order mark (as Windows
# editors write) dropped rather than read as part of the first field.
ENCODING = "utf-8-sig"

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000


@dataclass(frozen=True, slots=True)
class TraceRequest:
    request_id: int
    arrival_ns: int | None  # as recorded; None when the trace has no arrival times
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...] | None = None
    session_id: str | None = None
    trace_id: str | None = None   # the trace's own id (servesim-jsonl `request_id`), kept for requests.csv
    # Tokens hash_ids stand for: None, the prompt's only (its output is its own); a session
    # turn's (workload/sessions.py) cover its output too, which the next turn's prompt holds.
    content_length: int | None = None
    # A later turn of a session trace (workload/session_trace.py): sent this long after the
    # turn before it reached the user; None for every other request.
    delay_ns: int | None = None
    # An agentic trace's request (workload/agentic_trace.py): the requests it waits on.
    parents: tuple[int, ...] | None = None


class TraceError(ServesimError):
    pass


def file_sha256(path: Path) -> str:
    # The bytes as stored (a byte-order mark included): the hash identifies the file.
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@contextmanager
def _read_errors(path: Path):
    """Reading `path`: what the system says becomes one sentence naming the trace file."""
    try:
        yield
    except FileNotFoundError:
        raise TraceError(f"trace file {path} does not exist") from None
    except IsADirectoryError:
        raise TraceError(f"trace file {path} is a folder, not a file") from None
    except UnicodeDecodeError:
        raise TraceError(f"trace file {path} is not UTF-8 text") from None
    except OSError as err:
        raise TraceError(f"cannot read trace file {path}: {err.strerror or err}") from None


def infer_format(path: Path) -> str:
    """Guess a trace's format from its extension and first line."""
    with _read_errors(path), open(path, encoding=ENCODING) as fh:
        first = ""
        for line in fh:
            if line.strip():
                first = line.strip()
                break
    if first.startswith("{"):
        try:
            keys = set(json.loads(first))
        except (json.JSONDecodeError, TypeError, RecursionError):
            raise TraceError(f"{path} line 1: not a JSON object") from None
        return "servesim-jsonl" if keys & {"request_id", "session_id"} else "mooncake"
    header = {h.strip() for h in first.split(",")}
    if "TIMESTAMP" in header:
        return "azure"
    if "num_prefill_tokens" in header:
        return "vidur"
    raise TraceError(f"cannot tell the format of trace {path}; set workload.format to one of "
                     "mooncake, azure, vidur, servesim-jsonl")


def _positive_int(value: object, name: str, where: str, minimum: int = 1) -> int:
    """A JSON integer, or (from CSV) the decimal text of one."""
    if isinstance(value, str):
        text = value.strip()
        if not text.lstrip("-").isdigit():
            raise TraceError(f"{where}: {name} must be an integer, got {value!r}")
        value = int(text)
    elif isinstance(value, bool) or not isinstance(value, int):
        raise TraceError(f"{where}: {name} must be an integer, got {value!r}")
    if value < minimum:
        raise TraceError(f"{where}: {name} must be at least {minimum}, got {value}")
    check_tokens(value, f"{where}: {name}")
    return value


def _json_int(value: object, name: str, where: str) -> int:
    if isinstance(value, str):
        raise TraceError(f"{where}: {name} must be an integer, got {value!r}")
    return _positive_int(value, name, where)


_JSONL_KEYS = {"timestamp", "input_length", "output_length", "hash_ids"}
_SERVESIM_KEYS = _JSONL_KEYS | {"request_id", "session_id"}


_INT_TYPE = {int}


def json_row(line: str, where: str, allowed: set[str], fmt: str) -> dict:
    """One JSON-lines row of a trace: an object with no key outside `allowed`."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise TraceError(f"{where}: invalid JSON ({err.msg})") from None
    except RecursionError:
        raise TraceError(f"{where}: invalid JSON (nested too deeply)") from None
    if not isinstance(row, dict):
        raise TraceError(f"{where}: expected a JSON object")
    unknown = sorted(set(row) - allowed)
    if unknown:
        raise TraceError(f"{where}: unknown field {unknown[0]!r} for format {fmt}")
    return row


def milliseconds_ns(row: dict, name: str, where: str) -> int | None:
    """A row's non-negative milliseconds field in ns (None when absent)."""
    value = row.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
        raise TraceError(f"{where}: {name} must be a non-negative number of milliseconds, got {value!r}")
    check_time_ms(value, f"{where}: {name}")
    return value * NS_PER_MS if isinstance(value, int) else round(value * NS_PER_MS)


def hash_ids_of(hash_ids: object, where: str) -> tuple[int, ...] | None:
    """A row's block hashes (None when absent), within servesim's limit."""
    if hash_ids is None:
        return None
    # Types read in C (a bool's type is bool, so true/false are refused too).
    if not isinstance(hash_ids, list) or not set(map(type, hash_ids)) <= _INT_TYPE:
        raise TraceError(f"{where}: hash_ids must be a list of integers")
    if len(hash_ids) > MAX_HASH_IDS:
        raise TraceError(f"{where}: hash_ids lists {len(hash_ids):,} blocks; servesim's limit is {MAX_HASH_IDS:,}")
    return tuple(hash_ids)


def _plain_row(row: object, allowed: set[str]) -> tuple | None:
    """(arrival ns, input, output, hash_ids) of a row that passes every check by plain type and
    range tests; None sends it to the checking path, which names what is wrong in its own words.
    Most rows of a real trace are plain, and this is about a third of the Python steps."""
    if type(row) is not dict or not row.keys() <= allowed:
        return None
    arrival, prompt, output = row.get("timestamp"), row.get("input_length"), row.get("output_length")
    if not (type(arrival) is int and 0 <= arrival <= MAX_TIME_MS
            and type(prompt) is int and 1 <= prompt <= MAX_REQUEST_TOKENS
            and type(output) is int and 1 <= output <= MAX_REQUEST_TOKENS):
        return None
    hash_ids = row.get("hash_ids")
    if hash_ids is not None:
        if type(hash_ids) is not list or len(hash_ids) > MAX_HASH_IDS or not set(map(type, hash_ids)) <= _INT_TYPE:
            return None
        hash_ids = tuple(hash_ids)
    return arrival * NS_PER_MS, prompt, output, hash_ids


def _checked_row(line: str, where: str, allowed: set[str], fmt: str) -> tuple:
    """`_plain_row`'s four values and the parsed row, each check raising its own sentence."""
    row = json_row(line, where, allowed, fmt)
    arrival = milliseconds_ns(row, "timestamp", where)
    if arrival is None:
        raise TraceError(f"{where}: timestamp is required")
    hash_ids = hash_ids_of(row.get("hash_ids"), where)
    return (arrival, _json_int(row.get("input_length"), "input_length", where),
            _json_int(row.get("output_length"), "output_length", where), hash_ids), row


def _read_jsonl(path: Path, fmt: str, limit: int | None) -> list[TraceRequest]:
    allowed = _SERVESIM_KEYS if fmt == "servesim-jsonl" else _JSONL_KEYS
    out: list[TraceRequest] = []
    with open(path, encoding=ENCODING) as fh:
        for line_no, line in enumerate(fh, 1):
            if limit is not None and len(out) >= limit:
                break
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                row = None
            values = _plain_row(row, allowed)
            if values is None:
                values, row = _checked_row(line, f"{path} line {line_no}", allowed, fmt)
            arrival, prompt, output, hash_ids = values
            session = row.get("session_id")
            out.append(TraceRequest(
                request_id=len(out),
                arrival_ns=arrival,
                input_length=prompt,
                output_length=output,
                hash_ids=hash_ids,
                session_id=None if session is None else str(session),
                trace_id=None if row.get("request_id") is None else str(row["request_id"]),
            ))
    return out


def _azure_ns(text: str, where: str) -> int:
    """'2023-11-16 18:17:03.9799600' → ns since the epoch, exactly (100 ns resolution text)."""
    try:
        head, _, frac = text.strip().partition(".")
        if len(head) != 19 or head[10] != " ":
            raise ValueError(head)
        seconds = datetime.fromisoformat(head).replace(tzinfo=timezone.utc)
        if frac and not frac.isdigit():
            raise ValueError(frac)
        frac_ns = int((frac + "000000000")[:9]) if frac else 0
    except ValueError:
        raise TraceError(f"{where}: TIMESTAMP {text!r} is not 'YYYY-MM-DD HH:MM:SS[.fraction]'") from None
    return int(seconds.timestamp()) * NS_PER_S + frac_ns


def _csv_rows(reader, path: Path):
    """The reader's rows, its own errors (a NUL byte, a huge field) as one sentence naming the line."""
    while True:
        try:
            yield next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            raise TraceError(f"{path} line {reader.line_num}: not valid CSV ({err})") from None


def _read_csv(path: Path, fmt: str, limit: int | None) -> list[TraceRequest]:
    out: list[TraceRequest] = []
    with open(path, encoding=ENCODING, newline="") as fh:
        reader = csv.reader(fh)
        rows = _csv_rows(reader, path)
        try:
            header = [h.strip() for h in next(rows)]
        except StopIteration:
            raise TraceError(f"{path} is empty") from None
        if fmt == "azure":
            need = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
        else:
            need = ("num_prefill_tokens", "num_decode_tokens")
        missing = [c for c in need if c not in header]
        if missing:
            raise TraceError(f"{path} line 1: missing column {missing[0]} for format {fmt}")
        col = {name: header.index(name) for name in header}
        first_ns: int | None = None
        for row in rows:
            if limit is not None and len(out) >= limit:
                break
            if not row or all(not cell.strip() for cell in row):
                continue
            where = f"{path} line {reader.line_num}"
            if len(row) != len(header):
                raise TraceError(f"{where}: expected {len(header)} columns, found {len(row)}")
            if fmt == "azure":
                stamp = _azure_ns(row[col["TIMESTAMP"]], where)
                first_ns = stamp if first_ns is None else first_ns
                arrival: int | None = stamp - first_ns
                if arrival < 0:
                    raise TraceError(f"{where}: TIMESTAMP is earlier than the first row's")
                check_time_ms(arrival / NS_PER_MS, f"{where}: TIMESTAMP (after the first row's)")
                inp, outp = row[col["ContextTokens"]], row[col["GeneratedTokens"]]
                names = ("ContextTokens", "GeneratedTokens")
            else:
                arrival = None
                if "arrived_at" in col:
                    try:
                        seconds = float(row[col["arrived_at"]])
                    except ValueError:
                        raise TraceError(f"{where}: arrived_at must be a number of seconds") from None
                    if not seconds >= 0:
                        raise TraceError(f"{where}: arrived_at must be non-negative")
                    check_time_ms(seconds, f"{where}: arrived_at", unit="s")
                    arrival = round(seconds * NS_PER_S)
                inp, outp = row[col["num_prefill_tokens"]], row[col["num_decode_tokens"]]
                names = ("num_prefill_tokens", "num_decode_tokens")
            out.append(TraceRequest(
                request_id=len(out),
                arrival_ns=arrival,
                input_length=_positive_int(inp.strip(), names[0], where),
                output_length=_positive_int(outp.strip(), names[1], where),
            ))
    return out


def load_trace(path: Path, fmt: str | None = None, limit: int | None = None) -> tuple[list[TraceRequest], str]:
    """Read a trace file; returns its requests (in file order) and the format used."""
    fmt = fmt or infer_format(path)
    _JUST_HASHED.clear()
    key = _memo_key(path, fmt, limit)
    if key is not None and key in _READ_MEMO:
        _JUST_HASHED[key[0]] = key[3]
        return list(_READ_MEMO[key]), fmt
    with _read_errors(path):
        if fmt in ("mooncake", "servesim-jsonl"):
            requests = _read_jsonl(path, fmt, limit)
        elif fmt == "mooncake-sessions":
            from servesim.workload.session_trace import read_session_trace

            requests = read_session_trace(path, limit)
        elif fmt == "agentic-mooncake":
            from servesim.workload.agentic_trace import read_agentic_trace

            requests = read_agentic_trace(path, limit)
        elif fmt == "weka-trace":
            from servesim.workload.weka_trace import read_weka_trace

            requests = read_weka_trace(path, limit)
        else:
            requests = _read_csv(path, fmt, limit)
    if not requests:
        raise TraceError(f"trace file {path} holds no requests")
    if key is not None:
        _READ_MEMO.clear()
        _READ_MEMO[key] = tuple(requests)
        _JUST_HASHED[key[0]] = key[3]
    return requests, fmt


def trace_sha256(path: Path) -> str:
    """A trace file's SHA-256 (for the summary): the one `load_trace` just took for its memo
    when this file was the last it read, else hashed now. A sweep trial read the file's
    bytes twice for the same hash (~1.5 ms of the Azure conv trace's ~719 kB)."""
    digest = _JUST_HASHED.pop(os.fspath(path), None)
    return file_sha256(path) if digest is None else digest


# The last plain trace read, by its bytes: a sweep's trials (and its own count of them) read
# the same file again and again, ~25 ms a trial for the Azure conv trace's 2,000 rows, where
# hashing it takes ~1 ms (run.py hashes it for the summary anyway). Its requests are frozen;
# each caller gets a list of its own. Session, agentic and weka traces are read afresh.
_READ_MEMO: dict[tuple, tuple[TraceRequest, ...]] = {}
_UNMEMOISED = ("mooncake-sessions", "agentic-mooncake", "weka-trace")
# The file the last `load_trace` read and hashed, until `trace_sha256` takes its hash: path -> SHA-256.
_JUST_HASHED: dict[str, str] = {}


def _memo_key(path: Path, fmt: str, limit: int | None) -> tuple | None:
    """(path, format, limit, the file's SHA-256); None: not memoised, or unreadable (the read
    then reports it in its own words)."""
    if fmt in _UNMEMOISED or not os.path.isfile(path):   # a pipe is read once
        return None
    try:
        return (os.fspath(path), fmt, limit, file_sha256(path))
    except OSError:
        return None
