"""Small hand-made traces through the public API: the trace, the config, and a `Run` to read."""

from __future__ import annotations

import io
import json
from pathlib import Path

import servesim


# A request path with round costs for hand-checked runs (engine.request_path): in 1 + 0.5 ms,
# 2 ms more to the ranks of a worker of more than one GPU, 10 µs a prompt token; out 0.25 ms.
REQUEST_PATH = {"enabled": True, "http_ms": 1.0, "to_engine_ms": 0.5, "broadcast_ms": 2.0, "output_ms": 0.25,
                "tokenizer_us_per_token": 10.0}


def write_trace(path: Path, rows: list[dict]) -> Path:
    """Rows are Mooncake-style dicts; `timestamp` is in milliseconds."""
    with open(path, "w") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    return path


def fixed_config(trace: Path, pass_ms: float = 10.0, client: dict | None = None, **scheduler) -> dict:
    sched = {"num_gpu_blocks": 1000, "max_model_len": 1024, "max_num_seqs": 256,
             "max_num_batched_tokens": 2048}
    sched.update(scheduler)
    return {
        "engine": {"timing": {"kind": "fixed", "pass_ms": pass_ms},
                   "workers": {"aggregated": {"scheduler": sched}}},
        "workload": {"trace": str(trace), "format": "mooncake",
                     "client": client or {"mode": "open_loop"}},
    }


class Run:
    def __init__(self, result, passes):
        self.result = result
        self.passes = passes
        self.by_id = {r.request_id: r for r in result.requests}

    def ttft_ms(self, request_id: int) -> float:
        return self.by_id[request_id].ttft_ns / 1e6

    def ms(self, request_id: int, event: str) -> float:
        """A request's timestamp in ms: event is first_token, finish, first_scheduled or arrival."""
        return getattr(self.by_id[request_id], f"{event}_ns") / 1e6

    def pass_at(self, start_ms: float) -> dict:
        """The pass record that starts at `start_ms`."""
        return next(p for p in self.passes if p["start_ms"] == start_ms)

    def schedule(self) -> list[dict]:
        """[{request_id: tokens}] per pass."""
        return [{int(k): v for k, v in p["scheduled"].items()} for p in self.passes]


def run_rows(tmp_path: Path, rows: list[dict], pass_ms: float = 10.0, client: dict | None = None,
             config_extra: dict | None = None, **scheduler) -> Run:
    trace = write_trace(tmp_path / "trace.jsonl", rows)
    config = fixed_config(trace, pass_ms, client, **scheduler)
    for key, value in (config_extra or {}).items():
        node = config
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    log = io.StringIO()
    result = servesim.simulate(config, pass_log=log)
    passes = [json.loads(line) for line in log.getvalue().splitlines()]
    return Run(result, passes)


def run_backend(tmp_path: Path, rows: list[dict], backend: str, scheduler: dict, pass_ms: float = 10.0,
                client: dict | None = None, role: dict | None = None, trace_block_size: int = 16,
                fast: bool = False) -> Run:
    """Rows through `backend` with exactly the scheduler settings given (fixed pass time)."""
    trace = write_trace(tmp_path / f"trace-{backend}.jsonl", rows)
    config = {
        "engine": {"backend": backend, "timing": {"kind": "fixed", "pass_ms": pass_ms},
                   "workers": {"aggregated": {"scheduler": scheduler, **(role or {})}}},
        "workload": {"trace": str(trace), "format": "mooncake", "trace_block_size": trace_block_size,
                     "client": client or {"mode": "open_loop"}},
    }
    if fast:   # the fast engine: no pass log
        return Run(servesim.simulate(config), [])
    log = io.StringIO()
    result = servesim.simulate(config, pass_log=log)
    return Run(result, [json.loads(line) for line in log.getvalue().splitlines()])


def sweep_base(num_requests: int) -> dict:
    """The sweep tests' base deployment: one small vLLM worker, a seeded Poisson workload."""
    return {
        "engine": {"timing": {"kind": "fixed", "pass_ms": 10.0},
                   "workers": {"aggregated": {"scheduler": {"num_gpu_blocks": 400, "max_model_len": 512,
                                                            "max_num_seqs": 8, "max_num_batched_tokens": 512}}}},
        "workload": {"synthetic": {"num_requests": num_requests, "input_length": {"min": 10, "max": 200},
                                   "output_length": {"min": 1, "max": 40}},
                     "client": {"mode": "poisson", "rate": 30.0}},
    }
