"""`servesim bench --vs aisimulate PYTHON`: each row against AISimulate's `predict`, in interleaved pairs.

Within every repeat the row runs once in servesim and then once in AISimulate (A B A B ...), so a
machine whose speed drifts between minutes slows both tools of a pair alike. A row's ratios are
taken per pair (AISimulate's time over servesim's) and reported as their median with the range
over the pairs: whole-process wall time, CPU time (user + system of the process and what it
waited for) and each tool's own clock (servesim's `wall_time_ms` in summary.json, AISimulate's in
its prediction.json). Never run in CI: it needs AISimulate's virtualenv (docs/performance.md).
"""

from __future__ import annotations

import json
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from servesim.errors import ServesimError
from servesim.yaml_io import dump_yaml

# AISimulate's hardware names for servesim's GPUs of the benchmark rows.
_AISIM_HARDWARE = {"b200": "b200_sxm", "h100-sxm": "h100_sxm"}
# The bundled config of Llama-3.1-8B in AISimulate (its newer name needs a download).
_AISIM_MODEL = "meta-llama/Meta-Llama-3.1-8B"


@dataclass
class ProcessTimes:
    wall_s: float
    cpu_s: float
    own_ms: float | None   # the tool's own clock, from its output file


def _kv_pool(config: dict, role: str) -> tuple[int, int]:
    """(block size in tokens, blocks) of the role's KV pool as servesim resolves the row's config."""
    from servesim.config import load_config
    from servesim.config.resolution import resolve

    scheduler = resolve(load_config(config)).roles[role].scheduler
    return scheduler.kv_block_size, scheduler.kv_blocks


def _token_budget(config: dict, role: str) -> int:
    """The tokens one pass may schedule, under each backend's own name for it."""
    from servesim.config import load_config
    from servesim.config.resolution import resolve

    scheduler = resolve(load_config(config)).roles[role].scheduler
    for name in ("max_num_batched_tokens", "chunked_prefill_size", "max_num_tokens"):
        if hasattr(scheduler, name):
            return getattr(scheduler, name)
    raise AssertionError(f"no token budget on {type(scheduler).__name__}")


def _aisim_worker(config: dict, role: str, max_sequences: int, replicas: int) -> dict:
    block_size, blocks = _kv_pool(config, role)
    return {
        "parallelism": {"tensor": 1, "pipeline": 1, "replicas": replicas},
        "scheduler": {"max_sequences": max_sequences, "max_batched_tokens": _token_budget(config, role)},
        "kv_cache": {"block_size": block_size, "prefix_caching": True,
                     "capacity": {"type": "fixed", "blocks": blocks}},
        # AISimulate's fixed timing charges prefill_ms for a pass with any prefill plus decode_ms
        # for one with any decode. servesim's fixed timing gives every pass 10 ms: 0 / 10 matches it
        # on every pass that decodes (a prefill-only pass is free in AISimulate), and a prefill
        # worker, whose passes only prefill, gets 10 / 0.
        "timing": {"type": "fixed", "prefill_ms": 10.0 if role == "prefill" else 0.0,
                   "decode_ms": 0.0 if role == "prefill" else 10.0},
    }


def _traffic(workload) -> dict | None:
    spec = workload.workload
    synthetic = spec.get("synthetic")
    if spec.get("format") == "mooncake" and workload.router is None:
        return {"source": {"type": "trace", "format": "mooncake", "paths": [spec["trace"]], "block_size": 512},
                "load": {"type": "trace_timestamps", "speedup": 1.0}}
    if synthetic is not None and "input_length" in synthetic:
        client = spec["client"]
        load = ({"type": "concurrency", "concurrency": client["concurrency"]} if client["mode"] == "closed_loop"
                else {"type": "poisson", "requests_per_second": client["rate"], "seed": 0})
        return {"source": {"type": "synthetic", "input_tokens": synthetic["input_length"],
                           "output_tokens": synthetic["output_length"]},
                "load": load, "stop": {"requests": synthetic["num_requests"]}}
    return None   # lengths resampled from a trace, sessions, or a router AISimulate lacks


def aisimulate_config(workload, servesim_config: dict) -> dict | None:
    """The row in AISimulate's `predict` config (0.13 dev build), or None where it has no counterpart.

    The KV pool, batch limit and token budget are servesim's resolved ones for the row (SGLang's
    and TensorRT-LLM's default pools, in their own block sizes); P/D rows become AISimulate's
    `disaggregated` mode with as many prefill and decode replicas and servesim's transfer bandwidth
    (50 GB/s, one NIC per GPU).
    """
    if not workload.aisimulate:
        return None
    traffic = _traffic(workload)
    if traffic is None:
        return None
    workers_cfg = servesim_config["engine"]["workers"]
    scheduler = next(iter(workers_cfg.values()))["scheduler"]
    max_sequences = next(scheduler[key] for key in ("max_num_seqs", "max_running_requests", "max_batch_size")
                         if key in scheduler)
    engine = {"model": _AISIM_MODEL, "hardware": _AISIM_HARDWARE[workload.gpu], "backend": workload.backend}
    if "prefill" in workers_cfg:
        engine["mode"] = "disaggregated"
        engine["workers"] = {role: _aisim_worker(servesim_config, role, max_sequences,
                                                 workers_cfg[role].get("count", 1))
                             for role in ("prefill", "decode")}
        engine["kv_transfer"] = {"bandwidth_gb_per_second": 50.0, "timing_mode": "full_prompt"}
    else:
        engine["mode"] = "aggregated"
        engine["workers"] = {"aggregated": _aisim_worker(servesim_config, "aggregated", max_sequences, 1)}
    return {"traffic": traffic, "engine": engine}


def aisimulate_command(python: Path) -> list[str]:
    """AISimulate's CLI next to its interpreter, else `python -m aisimulate`."""
    script = python.parent / "aisimulate"
    return [str(script)] if script.exists() else [str(python), "-m", "aisimulate"]


def _aisim_own_ms(out_dir: Path) -> float | None:
    for path in sorted(out_dir.rglob("prediction.json")):
        value = json.loads(path.read_text()).get("wall_time_ms")
        if isinstance(value, int | float):
            return float(value)
    return None


def run_aisimulate(config_path: Path, out_dir: Path, python: Path) -> ProcessTimes:
    cmd = [*aisimulate_command(python), "predict", "-c", str(config_path), "--output-dir", str(out_dir),
           "--overwrite", "--format", "json"]
    from servesim.bench import timed_process

    wall, status, stderr, usage = timed_process(cmd)
    cpu = usage.ru_utime + usage.ru_stime
    if status != 0:
        raise ServesimError(f"aisimulate predict exited {status}: {stderr.strip()[-400:] or 'no message'}")
    return ProcessTimes(wall, cpu, _aisim_own_ms(out_dir))


def run_servesim(config_path: Path, out_dir: Path) -> ProcessTimes:
    from servesim.bench import run_once

    m = run_once(config_path, out_dir)
    return ProcessTimes(m.wall_s, m.cpu_s, m.loop_s * 1e3)


@dataclass
class Pairs:
    servesim: list[ProcessTimes]
    aisimulate: list[ProcessTimes]

    def ratios(self, field: str) -> list[float]:
        """AISimulate's time over servesim's, pair by pair (>1: servesim is faster)."""
        out = []
        for mine, theirs in zip(self.servesim, self.aisimulate):
            a, b = getattr(theirs, field), getattr(mine, field)
            if a is not None and b:
                out.append(a / b)
        return out


def measure_pairs(workload, servesim_config: dict, python: Path, pairs: int) -> Pairs | None:
    """`pairs` interleaved runs of the row in both tools, or None if AISimulate has no counterpart."""
    theirs_cfg = aisimulate_config(workload, servesim_config)
    if theirs_cfg is None:
        return None
    result = Pairs([], [])
    with tempfile.TemporaryDirectory(prefix="servesim-vs-aisim-") as tmp:
        mine_path, theirs_path = Path(tmp) / "servesim.yaml", Path(tmp) / "aisimulate.yaml"
        mine_path.write_text(dump_yaml(servesim_config))
        theirs_path.write_text(dump_yaml(theirs_cfg))
        for i in range(pairs):
            result.servesim.append(run_servesim(mine_path, Path(tmp) / f"servesim{i}"))
            result.aisimulate.append(run_aisimulate(theirs_path, Path(tmp) / f"aisim{i}", python))
    return result


def spread(values: list[float]) -> str:
    """`median (min–max)` of ratios, or an empty cell."""
    if not values:
        return ""
    return f"{statistics.median(values):.2f}x ({min(values):.2f}–{max(values):.2f})"


VS_HEADER = ("| row | workload | pairs | servesim wall s | AISimulate wall s | wall ratio | CPU ratio | "
             "servesim own ms | AISimulate own ms | own-clock ratio |\n|---|---|---|---|---|---|---|---|---|---|")


def _median_ms(times: list[ProcessTimes]) -> str:
    """The median of the tools' own clocks (ms), or an empty cell when none reported one."""
    values = [p.own_ms for p in times if p.own_ms is not None]
    return f"{statistics.median(values):.0f}" if values else ""


def format_pairs(workload, result: Pairs) -> str:
    mine = statistics.median(p.wall_s for p in result.servesim)
    theirs = statistics.median(p.wall_s for p in result.aisimulate)
    return (f"| {workload.key} | {workload.title} | {len(result.servesim)} | {mine:.2f} | {theirs:.2f} | "
            f"{spread(result.ratios('wall_s'))} | {spread(result.ratios('cpu_s'))} | "
            f"{_median_ms(result.servesim)} | {_median_ms(result.aisimulate)} | "
            f"{spread(result.ratios('own_ms'))} |")
