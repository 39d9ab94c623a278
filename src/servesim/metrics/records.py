"""Per-request records and `requests.csv`."""

from __future__ import annotations

from dataclasses import dataclass

from servesim.engine.request import Request, Status

REQUEST_COLUMNS = (
    "request_id", "arrival_ms", "first_token_ms", "finish_ms", "input_length", "output_length",
    "cached_tokens", "preemptions", "worker", "ttft_ms", "e2e_ms",
    "tpot_ms", "first_scheduled_ms", "requested_output_length", "status",
)


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

    @classmethod
    def of(cls, request: Request) -> RequestRecord:
        if request.status == Status.REJECTED:
            status = "rejected"
        elif request.num_output < request.requested_output:
            status = "length_capped"
        else:
            status = "ok"
        return cls(
            request_id=request.request_id,
            arrival_ns=request.arrival_ns,
            first_token_ns=request.first_token_ns,
            finish_ns=request.finish_ns,
            input_length=request.prompt_len,
            output_length=request.num_output,
            cached_tokens=request.cached_tokens or 0,
            preemptions=request.num_preemptions,
            worker=request.worker,
            first_scheduled_ns=request.first_scheduled_ns,
            requested_output_length=request.requested_output,
            status=status,
        )

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


def _ms(ns: float | None) -> str:
    if ns is None:
        return ""
    if isinstance(ns, int):
        whole, frac = divmod(ns, 1_000_000)
        return f"{whole}.{frac:06d}".rstrip("0").rstrip(".")
    return f"{ns / 1e6:.6f}".rstrip("0").rstrip(".")


def csv_row(r: RequestRecord) -> str:
    return ",".join((
        str(r.request_id), _ms(r.arrival_ns), _ms(r.first_token_ns), _ms(r.finish_ns),
        str(r.input_length), str(r.output_length), str(r.cached_tokens), str(r.preemptions),
        r.worker, _ms(r.ttft_ns), _ms(r.e2e_ns), _ms(r.tpot_ns), _ms(r.first_scheduled_ns),
        str(r.requested_output_length), r.status,
    ))


def ms_text(ns: int | float | None) -> str:
    return _ms(ns)
