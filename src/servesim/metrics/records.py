"""Per-request records: kept as compact columns, streamed to `requests.csv` in id order."""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TextIO

import numpy as np

from servesim.engine.request import REJECTED, Request
from servesim.errors import ServesimError

REQUEST_COLUMNS = (
    "request_id", "arrival_ms", "first_token_ms", "finish_ms", "input_length", "output_length",
    "cached_tokens", "preemptions", "worker", "ttft_ms", "e2e_ms",
    "tpot_ms", "first_scheduled_ms", "requested_output_length", "status",
    "prefill_worker", "transfer_start_ms", "transfer_end_ms", "transfer_bytes", "host_cached_tokens",
    "trace_request_id", "error", "request_path_ms", "queue_ms", "prefill_ms", "transfer_ms",
)
STATUSES = ("ok", "length_capped", "rejected")
_NONE = -1
_EXACT = 1 << 53   # ints below it are exact as doubles
_MAX_WORKER_CODE = 0xFFFF   # worker codes are stored in uint16 columns


@dataclass(frozen=True, slots=True)
class RequestRecord:
    request_id: int
    arrival_ns: int
    first_token_ns: int | None
    finish_ns: int | None
    input_length: int
    output_length: int          # tokens produced
    cached_tokens: int          # prompt tokens served from the prefix cache at first admission
    preemptions: int
    worker: str
    first_scheduled_ns: int | None
    requested_output_length: int
    status: str                 # "ok", "length_capped" (max_model_len cut the output) or "rejected"
    prefill_worker: str = ""    # disaggregated serving: where the prompt was computed
    transfer_start_ns: int | None = None
    transfer_end_ns: int | None = None
    transfer_bytes: int = 0
    host_cached_tokens: int = 0  # KV offload: prompt tokens loaded from the host tier at first admission
    trace_request_id: str = ""  # the trace's own id (servesim-jsonl `request_id`), when it has one
    error: str = ""             # why a rejected request was refused

    @property
    def completed(self) -> bool:
        return self.status != "rejected"

    @property
    def ttft_ns(self) -> int | None:
        return None if self.first_token_ns is None else self.first_token_ns - self.arrival_ns

    @property
    def e2e_ns(self) -> int | None:
        return None if self.finish_ns is None else self.finish_ns - self.arrival_ns

    @property
    def tpot_ns(self) -> float | None:
        if self.finish_ns is None or self.output_length < 2:
            return None
        return (self.finish_ns - self.first_token_ns) / (self.output_length - 1)


def status_of(request: Request) -> int:
    if request.status == REJECTED:
        return 2
    return 1 if request.num_output < request.requested_output else 0


def _ms(ns: int | float | None) -> str:
    if ns is None:
        return ""
    if isinstance(ns, int):
        whole, frac = divmod(ns, 1_000_000)
        return f"{whole}.{frac:06d}".rstrip("0").rstrip(".")
    return _fraction_ms(ns / 1e6)


def _fraction_ms(ms: float) -> str:
    """A millisecond value given as a float, to the nanosecond, trailing zeros cut."""
    return f"{ms:.6f}".rstrip("0").rstrip(".")


def _cell(text: str) -> str:
    """A CSV cell: quoted (quotes doubled) when it holds a separator, quote or line break."""
    if any(c in text for c in ',"\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


class RequestTable:
    """Every request's record, in completion order: one row of ints a request (about 150
    bytes), read as numpy columns.

    Iterating or indexing yields `RequestRecord`s sorted by request id.
    """

    # A row's fields, in order; the last three are small codes (a worker name's index, a status).
    COLUMNS = ("request_id", "arrival_ns", "first_token_ns", "finish_ns", "input_length",
               "output_length", "cached_tokens", "preemptions", "first_scheduled_ns",
               "requested_output_length", "transfer_start_ns", "transfer_end_ns", "transfer_bytes",
               "host_cached_tokens", "engine_arrival_ns", "outbound_ns", "worker", "prefill_worker", "status")
    _WIDTH = len(COLUMNS)
    _POSITION = {name: i for i, name in enumerate(COLUMNS)}
    _CODE_TYPES = {"worker": np.uint16, "prefill_worker": np.uint16, "status": np.int8}

    def __init__(self) -> None:
        # One flat array, a row per request: appending a request is one `extend` of a tuple,
        # where a column each took 19 method calls.
        self._rows = array("q")
        self.workers: list[str] = []
        self._worker_index: dict[str, int] = {}
        self._order: np.ndarray | None = None
        # Set after the run (servesim.run): the trace's own ids, indexed by request id (None:
        # the workload has none), and the reason each rejected request was refused.
        self.trace_ids: list[str | None] | None = None
        self.errors: dict[int, str] = {}

    def trace_id_of(self, request_id: int) -> str:
        ids = self.trace_ids
        if ids is None or request_id >= len(ids) or ids[request_id] is None:
            return ""
        return ids[request_id]

    def append(self, request: Request) -> None:
        names = self._worker_index
        worker = names.get(request.worker)
        if worker is None:
            worker = self._name_index(request.worker)
        prefill_worker = names.get(request.prefill_worker)
        if prefill_worker is None:
            prefill_worker = self._name_index(request.prefill_worker)
        first_token = request.first_token_ns
        finish = request.finish_ns
        scheduled = request.first_scheduled_ns
        transfer_start = request.transfer_start_ns
        transfer_end = request.transfer_end_ns
        self._rows.extend((
            request.request_id, request.arrival_ns,
            _NONE if first_token is None else first_token, _NONE if finish is None else finish,
            request.prompt_len, request.num_output, request.cached_tokens or 0, request.num_preemptions,
            _NONE if scheduled is None else scheduled, request.requested_output,
            _NONE if transfer_start is None else transfer_start, _NONE if transfer_end is None else transfer_end,
            request.transfer_bytes, request.host_cached_tokens, request.engine_arrival_ns, request.outbound_ns,
            worker, prefill_worker, status_of(request),
        ))
        self._order = None

    def _name_index(self, name: str) -> int:
        index = self._worker_index.get(name)
        if index is None:
            if len(self.workers) > _MAX_WORKER_CODE:   # the code columns read as uint16
                raise ServesimError(f"a run's requests name more than {_MAX_WORKER_CODE + 1:,} workers; "
                                    f"servesim records at most that many")
            index = self._worker_index[name] = len(self.workers)
            self.workers.append(name)
        return index

    def __len__(self) -> int:
        return len(self._rows) // self._WIDTH

    def column(self, name: str) -> np.ndarray:
        """A column as a numpy array, in completion order (-1 stands for none)."""
        rows = np.frombuffer(self._rows, dtype=np.int64).reshape(-1, self._WIDTH)
        values = rows[:, self._POSITION[name]]
        code_type = self._CODE_TYPES.get(name)
        return values if code_type is None else values.astype(code_type)

    def id_order(self) -> np.ndarray:
        """Positions of the records in request-id order."""
        return self._sorted()

    def _sorted(self) -> np.ndarray:
        if self._order is None:
            self._order = np.argsort(self.column("request_id"), kind="stable")
        return self._order

    def _record(self, i: int) -> RequestRecord:
        width = self._WIDTH
        (request_id, arrival, first_token, finish, input_length, output_length, cached, preemptions,
         scheduled, requested, transfer_start, transfer_end, transfer_bytes, host_cached, _, _,
         worker, prefill_worker, status) = self._rows[i * width:(i + 1) * width]

        def opt(value: int) -> int | None:
            return None if value == _NONE else value

        return RequestRecord(
            request_id=request_id, arrival_ns=arrival, first_token_ns=opt(first_token),
            finish_ns=opt(finish), input_length=input_length, output_length=output_length,
            cached_tokens=cached, preemptions=preemptions, worker=self.workers[worker],
            first_scheduled_ns=opt(scheduled),
            requested_output_length=requested, status=STATUSES[status],
            prefill_worker=self.workers[prefill_worker], transfer_start_ns=opt(transfer_start),
            transfer_end_ns=opt(transfer_end), transfer_bytes=transfer_bytes,
            host_cached_tokens=host_cached,
            trace_request_id=self.trace_id_of(request_id), error=self.errors.get(request_id, ""),
        )

    def __getitem__(self, position: int) -> RequestRecord:
        return self._record(int(self._sorted()[position]))

    def __iter__(self) -> Iterator[RequestRecord]:
        for i in self._sorted().tolist():
            yield self._record(i)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RequestTable):
            return list(self) == list(other)
        if isinstance(other, list):
            return list(self) == other
        return NotImplemented

    def write_csv(self, fh: TextIO, chunk: int = 1 << 15) -> None:
        """One line per record in id order (REQUEST_COLUMNS; times in ms, blank for none).

        Building a `RequestRecord` per row cost more than the simulation of a steady
        decode workload, so the columns are formatted from numpy arrays instead. This is
        done `chunk` rows at a time: a million rows as twenty lists of strings would take
        gigabytes.
        """
        fh.write(",".join(REQUEST_COLUMNS) + "\n")
        order = self._sorted()
        for begin in range(0, len(order), chunk):
            self._write_rows(fh, order[begin:begin + chunk])

    @staticmethod
    def _ttft_parts(ints, first: np.ndarray, arrival: np.ndarray) -> tuple[np.ndarray, ...]:
        """TTFT in four parts that add up to it: the request path (in and out), the wait for the
        first pass that schedules the request, its prefill (to the first token leaving the
        engine; under disaggregation to the handoff), and the KV transfer with the decode
        worker's first pass. A part that does not apply is blank (-1 here)."""
        engine_arrival, outbound = ints("engine_arrival_ns"), ints("outbound_ns")
        scheduled, transfer = ints("first_scheduled_ns"), ints("transfer_start_ns")
        started, handed = first != _NONE, transfer != _NONE
        engine_first = first - outbound
        path = engine_arrival - arrival + np.where(started, outbound, 0)
        was_scheduled = scheduled != _NONE
        queue = np.where(was_scheduled, scheduled - engine_arrival, _NONE)
        prefill_end = np.where(handed, transfer, engine_first)
        prefill = np.where(started & was_scheduled, prefill_end - scheduled, _NONE)
        transferred = np.where(started & handed, engine_first - transfer, _NONE)
        return path, queue, prefill, transferred

    @staticmethod
    def _tpot_cells(span: np.ndarray, output: np.ndarray, defined: np.ndarray) -> list[str]:
        """TPOT cells (ms): the span from first token to finish over the output's gaps, as `_ms`
        writes `span / (output - 1)`, blank where undefined.

        Divided in bulk: ints below 2**53 are exact as doubles, and Python divides two such
        ints as doubles too, so the quotients are the same; the per-cell call was 8 ms of
        row 5's 12,031 rows. A column with any span of 2**53 ns or more (104 days) is divided
        cell by cell."""
        gaps = np.maximum(output - 1, 1)
        if not len(span) or int(np.abs(span).max()) >= _EXACT or int(gaps.max()) >= _EXACT:
            return [_ms(end / (count - 1)) if ok else ""
                    for end, count, ok in zip(span.tolist(), output.tolist(), defined.tolist())]
        ms = (span / gaps / 1e6).tolist()
        return [_fraction_ms(x) if ok else "" for x, ok in zip(ms, defined.tolist())]

    def _write_rows(self, fh: TextIO, order: np.ndarray) -> None:
        def ints(name: str) -> np.ndarray:
            return self.column(name)[order]

        def plain(values: np.ndarray) -> list[str]:
            return list(map(str, values.tolist()))

        def times(values: np.ndarray) -> list[str]:
            # _ms per value, with the common whole-millisecond and missing cases done in bulk.
            # A missing value (-1) has a fraction too (999999 ns): it is not formatted only to be
            # blanked. A column that does not apply is blank throughout (an aggregated run's three
            # transfer columns: row 5 formatted 36,093 such cells, then blanked them).
            missing = values == _NONE
            if missing.all():
                return [""] * len(values)
            whole, frac = np.divmod(values, 1_000_000)
            whole_ms = whole.tolist()
            out = list(map(str, whole_ms))
            parts = frac.tolist()
            for i in np.flatnonzero((frac != 0) & ~missing).tolist():
                out[i] = f"{whole_ms[i]}.{parts[i]:06d}".rstrip("0")
            for i in np.flatnonzero(missing).tolist():
                out[i] = ""
            return out

        arrival, first, finish = ints("arrival_ns"), ints("first_token_ns"), ints("finish_ns")
        output = ints("output_length")
        names = self.workers
        started = first != _NONE
        finished = finish != _NONE
        ttft = np.where(started, first - arrival, _NONE)
        e2e = np.where(finished, finish - arrival, _NONE)
        tpot_defined = finished & (output >= 2)
        tpot = self._tpot_cells(finish - first, output, tpot_defined)
        ids = ints("request_id").tolist()
        trace_ids = [""] * len(ids) if self.trace_ids is None else [_cell(self.trace_id_of(i)) for i in ids]
        errors = [_cell(self.errors.get(i, "")) for i in ids] if self.errors else [""] * len(ids)
        columns = (
            list(map(str, ids)), times(arrival), times(first), times(finish),
            plain(ints("input_length")), plain(output), plain(ints("cached_tokens")),
            plain(ints("preemptions")), [names[i] for i in self.column("worker")[order].tolist()],
            times(ttft), times(e2e), tpot, times(ints("first_scheduled_ns")),
            plain(ints("requested_output_length")),
            [STATUSES[i] for i in self.column("status")[order].tolist()],
            [names[i] for i in self.column("prefill_worker")[order].tolist()],
            times(ints("transfer_start_ns")), times(ints("transfer_end_ns")),
            plain(ints("transfer_bytes")), plain(ints("host_cached_tokens")), trace_ids, errors,
            *(times(part) for part in self._ttft_parts(ints, first, arrival)),
        )
        fh.writelines(",".join(row) + "\n" for row in zip(*columns))
