"""Warnings after a run: what a user would otherwise read wrongly from its figures.

Each rule is one function returning a sentence (or None); docs/outputs.md states
the criteria. They read the finished run's records and its resolved config only,
so they cost one numpy pass over the requests and change no simulated number.
"""

from __future__ import annotations


import numpy as np

from servesim.engine.registry import get_backend
from servesim.metrics.records import RequestTable

# More than this fraction of the requests still waiting (arrived, not yet scheduled) when
# the last one arrives means the deployment did not keep up with the offered load.
BACKLOG_FRACTION = 0.05


def _limit(sched, backend: str) -> tuple[str, int]:
    """The frontend's length limit under the backend's own name, and its value."""
    name = get_backend(backend).length_limit_key
    return name, int(getattr(sched, name))


def rejection_text(code: str, input_length: int, sched, backend: str) -> str:
    """The `error` cell of a rejected request in requests.csv."""
    if code == "prompt_exceeds_max_model_len":
        name, value = _limit(sched, backend)
        return f"prompt of {input_length} tokens leaves no room for output within {name} {value}"
    # A reason of the engine's own (its Backend's reject_reason) is worded by the engine.
    return get_backend(backend).rejection_text(code, input_length, sched) or "rejected by the frontend"


def label_rejections(records: RequestTable, roles, factories, backend: str) -> dict[str, int]:
    """Fill `records.errors` with each rejected request's reason; counts per reason code."""
    status = records.column("status")
    rejected = np.flatnonzero(status == 2)
    if rejected.size == 0:
        return {}
    role_of = {worker.name: name for name, role in roles.items() for worker in role.workers}
    ids = records.column("request_id")[rejected].tolist()
    lengths = records.column("input_length")[rejected].tolist()
    workers = records.column("worker")[rejected].tolist()
    counts: dict[str, int] = {}
    for request_id, length, worker in zip(ids, lengths, workers):
        role = role_of.get(records.workers[worker])
        factory = factories.get(role)
        code = (factory.reject_reason(length) if factory is not None else None) or "rejected"
        counts[code] = counts.get(code, 0) + 1
        records.errors[request_id] = (rejection_text(code, length, factory.sched, backend)
                                      if code != "rejected" else "rejected by the frontend")
    return dict(sorted(counts.items()))


def rejection_warning(counts: dict[str, int], total: int, roles, backend: str) -> str | None:
    if not counts:
        return None
    sched = next(iter(roles.values())).scheduler_cfg
    parts = []
    for code, n in counts.items():
        if code == "prompt_exceeds_max_model_len":
            name, value = _limit(sched, backend)
            parts.append(f"{n:,} with a prompt that leaves no room for output within {name} ({value:,})")
        else:
            words = get_backend(backend).rejection_summary(code, n, sched)
            parts.append(words or f"{n:,} for another reason")
    rejected = sum(counts.values())
    return (f"{rejected:,} of {total:,} requests ({100 * rejected / total:.1f}%) were rejected: "
            + "; ".join(parts) + "; their reasons are in requests.csv's error column")


def is_closed_loop(client) -> bool:
    """A client whose next request waits for an earlier one to finish: it cannot overload."""
    from servesim.workload.bench_client import is_closed_loop as bench_is_closed_loop

    # A bench client with a ramp-up sends at rising rates, even behind max_concurrency: not a closed loop.
    return client.mode == "closed_loop" or (client.mode == "bench" and bench_is_closed_loop(client))


def backlog_at_last_arrival(records: RequestTable) -> tuple[int, int, int]:
    """(requests waiting when the last one arrives, requests served, that arrival time ns).

    Waiting: arrived strictly before the last arrival, not rejected, and first scheduled
    after it (warm-up requests count: they load the engine like any other)."""
    arrival = records.column("arrival_ns")
    scheduled = records.column("first_scheduled_ns")
    served = records.column("status") != 2
    if not served.any():
        return 0, 0, 0
    last = int(arrival.max())
    waiting = served & (arrival < last) & ((scheduled > last) | (scheduled < 0))
    return int(waiting.sum()), int(served.sum()), last


def overload_warning(records: RequestTable, client) -> str | None:
    if is_closed_loop(client) or len(records) == 0:
        return None
    arrival = records.column("arrival_ns")
    if int(arrival.min()) == int(arrival.max()):
        return None   # one burst: every request waits by design (see the no-arrival-times warning)
    waiting, served, last = backlog_at_last_arrival(records)
    if served == 0 or waiting <= BACKLOG_FRACTION * served:
        return None
    return (f"the offered load exceeds what the deployment serves: when the last request arrived "
            f"(at {last / 1e9:,.1f} s), {waiting:,} of the {served:,} requests served "
            f"({100 * waiting / served:.1f}%, more than {100 * BACKLOG_FRACTION:g}%) were still waiting to "
            "be scheduled, so latencies grow with the length of the workload; add workers or slow the "
            "client down")


def profile_fallback_warning(timing, gpu: str, backend: str, profile_given: bool) -> str | None:
    """Roofline timing with no fit for this GPU and backend: another one's fit is used."""
    if timing.kind != "roofline" or profile_given:
        return None
    engine = get_backend(backend)
    key = timing.profile   # the fit resolve() found for this run, when every role shares one
    if key is None:
        from servesim.timing.roofline import fitted_profile

        key = fitted_profile(gpu, engine.timing_profile)[1]
    if key == engine.profile_key(gpu):
        return None
    used = "built-in default efficiencies" if key == "built-in defaults" else f"the {key!r} fit"
    return (f"no roofline fit exists for {gpu} with {backend}: step times use {used}, fitted on "
            "other GPUs or backends, so expect larger timing errors (engine.timing.profile names a fit)")


def arrival_warnings(trace_requests, trace_path, client) -> list[str]:
    """A trace without arrival times replayed as is, or a closed loop ignoring a trace's times."""
    if trace_path is None or not isinstance(trace_requests, list) or not trace_requests:
        return []
    timed = any(r.arrival_ns is not None for r in trace_requests)
    if client.mode == "open_loop" and not timed:
        return [f"the trace {trace_path} has no arrival times, so all {len(trace_requests):,} requests arrive "
                "at time 0 as one burst; pace them with workload.client (mode poisson with a rate, or "
                "closed_loop with a concurrency)"]
    if timed and is_closed_loop(client):
        return [f"the closed-loop client ignores the arrival times in the trace {trace_path}: each user sends "
                "its next request when its previous one finishes; use mode open_loop to replay them"]
    return []
