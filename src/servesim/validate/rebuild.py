"""The workload and client that reproduce a measured run (docs/validate.md, "What is rebuilt").

Lengths: the file's per-request input and output lengths when it has them (a failed
request's output, recorded as 0, takes the mean of the successful ones); else its random
dataset's settings (vLLM's interval [floor(L(1−r)), ceil(L(1+r))], SGLang's [max(int(L·r), 1),
L]); else its mean lengths, rounded, for every request.

Traffic: the recorded send times when the file has them and no max_concurrency (an open
loop: send times then do not depend on the server); otherwise the `bench` client from the
recorded request rate, burstiness, max_concurrency and ramp-up, since under a semaphore the
send times are the server's doing and must be simulated, not replayed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from servesim.cli_shorthands import random_lengths
from servesim.errors import ServesimError
from servesim.validate.measured import MeasuredRun


def _length_range(length: int, ratio: float, rule: str, minimum: int = 1) -> int | dict[str, int]:
    """A random dataset's interval: "floor_ceil" (vLLM's) or "fraction_to_full" (SGLang's)."""
    if rule == "fraction_to_full":   # SGLang's [max(int(L·r), 1), L]
        low = max(int(length * ratio), 1)
        return length if low >= length else {"min": low, "max": length}
    return random_lengths(length, ratio, minimum)


def _client(run: MeasuredRun, replay_times: bool) -> dict[str, Any]:
    if replay_times:
        return {"mode": "open_loop"}
    client: dict[str, Any] = {"mode": "bench"}
    rate = run.request_rate
    client["request_rate"] = "inf" if rate in (None, "inf") or (isinstance(rate, float) and math.isinf(rate)) \
        else float(rate)
    burst = run.burstiness
    if burst is not None:
        client["burstiness"] = "inf" if burst == "inf" or (isinstance(burst, float) and math.isinf(burst)) \
            else float(burst)
    if run.max_concurrency is not None:
        client["max_concurrency"] = int(run.max_concurrency)
    if run.ramp_up is not None:
        client["request_rate"] = "inf"
        client.update(run.ramp_up)
    return client


def _trace_lines(run: MeasuredRun, replay_times: bool) -> list[str]:
    ok = [n for n in (run.ok_output_lens or run.output_lens or []) if n > 0]
    fallback = max(1, round(sum(ok) / len(ok))) if ok else max(1, round(run.mean_output_length or 1))
    lines = []
    for i, (inp, out) in enumerate(zip(run.input_lens, run.output_lens)):
        stamp = run.start_times[i] * 1e3 if replay_times else 0
        lines.append(json.dumps({"timestamp": stamp, "input_length": max(1, int(inp)),
                                 "output_length": int(out) if out > 0 else fallback}))
    return lines


def workload_for(run: MeasuredRun, folder: Path) -> dict[str, Any]:
    """engine-independent `workload` block for `run`; a per-request trace is written into `folder`."""
    per_request = run.input_lens is not None and run.output_lens is not None
    replay_times = run.start_times is not None and run.max_concurrency is None and per_request
    client = _client(run, replay_times)
    if per_request:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "rebuilt_trace.jsonl"
        path.write_text("\n".join(_trace_lines(run, replay_times)) + "\n", encoding="utf-8")
        return {"trace": str(path.resolve()), "format": "servesim-jsonl", "client": client}
    count = run.num_requests
    if count < 1:
        raise ServesimError(f"{run.path}: the file records no requests, so there is no workload to rebuild")
    if run.random_lengths is not None:
        spec = run.random_lengths
        ratio = float(spec.get("range_ratio") or 0.0)
        synthetic = {"num_requests": count,
                     "input_length": _length_range(int(spec["input_len"]), ratio, spec["rule"]),
                     "output_length": _length_range(int(spec["output_len"]), ratio, spec["rule"])}
    else:
        if run.mean_input_length is None or run.mean_output_length is None:
            raise ServesimError(f"{run.path}: the file has neither per-request lengths nor total or mean "
                                "input and output tokens, so the workload cannot be rebuilt")
        synthetic = {"num_requests": count, "input_length": max(1, round(run.mean_input_length)),
                     "output_length": max(1, round(run.mean_output_length))}
    return {"synthetic": synthetic, "client": client}


def workload_overrides(run: MeasuredRun, folder: Path) -> list[tuple[str, Any]]:
    """Overrides replacing a config's whole workload with the rebuilt one."""
    return [("workload", workload_for(run, folder))]
