"""`vllm bench serve --save-result [--save-detailed]` JSON (vLLM 0.32.0, vllm/benchmarks/serve.py).

`main_async` writes one JSON object: the set-up keys (model_id, backend, endpoint_type,
num_prompts, request_rate, burstiness, max_concurrency, ramp_up_* when ramping) merged with
what `benchmark` returns (duration in s, completed, failed, total_input_tokens,
total_output_tokens, request_throughput, output_throughput, total_token_throughput, and
mean_/median_/std_/pNN_ of ttft, tpot, itl and e2el in ms). `--save-detailed` keeps the
per-request lists input_lens, output_lens, ttfts (s), itls (s), start_times (s) and errors
("" when the request succeeded); latencies (s) stay either way. servesim's own
`--format vllm` writes the same keys (metrics/vllm_result.py).

vLLM does not record its dataset settings, but `--metadata KEY=VALUE ...` adds each pair as a
top-level key (text); random_input_len, random_output_len and random_range_ratio given so are
read as the random dataset's settings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servesim.errors import ServesimError
from servesim.validate.measured import METRICS, MeasuredRun, engine_named, need, number

TOOL = "vllm bench serve"
_NAMES = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e": "e2el"}
_RAMP = ("ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps")


def looks_like(data: Any) -> bool:
    """vLLM's set-up keys beside TTFT figures (SGLang's lines have a dataset_name instead)."""
    return (isinstance(data, dict) and "dataset_name" not in data
            and any(key in data for key in ("num_prompts", "endpoint_type", "tokenizer_id"))
            and ("mean_ttft_ms" in data or "ttfts" in data))


def _successful(values: list, errors: list | None) -> list:
    if errors is None:
        return list(values)
    return [v for v, e in zip(values, errors) if not e]


def read(data: dict, path: Path, label: str | None = None) -> MeasuredRun:
    prompts = int(number(need(data, "num_prompts", path, TOOL), path, "num_prompts"))
    completed = int(number(need(data, "completed", path, TOOL), path, "completed"))
    run = MeasuredRun(tool="vllm", path=path, label=label or path.name, num_requests=prompts,
                      completed=completed, failed=int(data.get("failed") or 0),
                      model=data.get("model_id"), engine=_engine(data.get("backend")),
                      request_rate=data.get("request_rate"), burstiness=data.get("burstiness"),
                      max_concurrency=data.get("max_concurrency"))
    if data.get("ramp_up_strategy") is not None:
        run.ramp_up = {key: data.get(key) for key in _RAMP}
    # A figure, not part of the workload: compared when present.
    run.duration_s = None if data.get("duration") is None else number(data["duration"], path, "duration")
    for key in ("request_throughput", "output_throughput", "total_token_throughput"):
        run.rates[key] = data.get(key)
    for key, attr in (("total_input_tokens", "mean_input_length"), ("total_output_tokens", "mean_output_length")):
        if data.get(key) is not None and completed:
            setattr(run, attr, number(data[key], path, key) / completed)
    for metric in METRICS:
        name = _NAMES[metric]
        run.stats[metric] = {stat: data.get(f"{stat}_{name}_ms") for stat in ("mean", "median", "p90", "p99")}
    _read_random_metadata(data, path, run)
    _read_detailed(data, path, run)
    return run


def _metadata_number(data: dict, key: str, path: Path) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    try:
        return float(value) if not isinstance(value, bool) else float("nan")
    except (TypeError, ValueError):
        raise ServesimError(f"{path}: {key} (a --metadata value) must be a number, got {value!r}") from None


def _read_random_metadata(data: dict, path: Path, run: MeasuredRun) -> None:
    lengths = {key: _metadata_number(data, f"random_{key}", path) for key in ("input_len", "output_len",
                                                                            "range_ratio")}
    if lengths["input_len"] is None or lengths["output_len"] is None:
        return
    ratio = lengths["range_ratio"] or 0.0
    if not (lengths["input_len"] >= 1 and lengths["output_len"] >= 1 and 0 <= ratio < 1):
        raise ServesimError(f"{path}: the --metadata random_input_len, random_output_len (at least 1) and "
                            "random_range_ratio (0 to 1) are out of range")
    run.random_lengths = {"input_len": int(lengths["input_len"]), "output_len": int(lengths["output_len"]),
                          "range_ratio": ratio, "rule": "floor_ceil"}


def _engine(backend: Any) -> str | None:
    """The client backend names the server only when it is an engine's own, not for openai."""
    return engine_named(backend)


def _read_detailed(data: dict, path: Path, run: MeasuredRun) -> None:
    if "input_lens" not in data:
        return
    for key in ("output_lens", "ttfts", "itls", "start_times"):
        need(data, key, path, TOOL, "per-request list ")
    lists = {key: data[key] for key in ("input_lens", "output_lens", "ttfts", "itls", "start_times")}
    if len({len(v) if isinstance(v, list) else -1 for v in lists.values()}) != 1:
        raise ServesimError(f"{path}: the per-request lists input_lens, output_lens, ttfts, itls and "
                            "start_times must have one entry per request")
    errors = data.get("errors")
    if errors is not None and (not isinstance(errors, list) or len(errors) != len(lists["ttfts"])):
        raise ServesimError(f"{path}: errors must be a list with one entry per request")
    run.input_lens, run.output_lens = lists["input_lens"], lists["output_lens"]
    run.start_times = lists["start_times"]
    run.ttfts = _successful(lists["ttfts"], errors)
    run.itls = _successful(lists["itls"], errors)
    latencies = data.get("latencies")
    if isinstance(latencies, list) and len(latencies) == len(run.input_lens):
        run.latencies = _successful(latencies, errors)
    run.ok_output_lens = _successful(run.output_lens, errors)
