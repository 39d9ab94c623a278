"""The speed benchmark suite (`servesim bench`, `python benchmarks/speed.py`).

Every row runs the whole `servesim run` process (start-up included) on one
deployment: Llama-3.1-8B on H100-SXM workers, vLLM, max_num_seqs 1024,
num_gpu_blocks 60000, with fixed 10 ms passes (or the roofline model): one worker,
except rows 5r (16 replicas, kv_aware router) and 5d (4 prefill + 4 decode workers). Rows 2s
and 2t run a shorter row 2a on SGLang and TensorRT-LLM (same batch limit, their default KV
pools), whose per-request schedulers fast-forward only their steady runs of decode passes.
Wall time is the median of `repeat` runs; peak RSS is the largest of them.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from servesim.yaml_io import dump_yaml

SHARED_TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"


@dataclass
class Workload:
    key: str
    title: str
    workload: dict
    needs: Path | None = None   # a trace file this row needs
    workers: dict | None = None  # engine.workers, when not the single aggregated worker
    router: dict | None = None
    backend: str = "vllm"


_SCHEDULER = {"max_num_seqs": 1024, "num_gpu_blocks": 60000}


def _closed(n: int, concurrency: int, isl: int, osl: int) -> dict:
    return {"synthetic": {"num_requests": n, "input_length": isl, "output_length": osl},
            "client": {"mode": "closed_loop", "concurrency": concurrency}}


def workloads(traces: Path = SHARED_TRACES) -> list[Workload]:
    mooncake = traces / "mooncake" / "conversation_trace.jsonl"
    azure = traces / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
    return [
        Workload("1a", "closed loop c64, 1024/1024, 2,000 requests", _closed(2000, 64, 1024, 1024)),
        Workload("1b", "closed loop c64, 1024/1024, 8,000 requests", _closed(8000, 64, 1024, 1024)),
        Workload("2a", "closed loop c256, 1024/1024, 8,000 requests", _closed(8000, 256, 1024, 1024)),
        Workload("2b", "closed loop c256, 1024/1024, 32,000 requests", _closed(32000, 256, 1024, 1024)),
        Workload("2s", "closed loop c256, 1024/1024, 2,000 requests, SGLang", _closed(2000, 256, 1024, 1024),
                 workers={"aggregated": {"scheduler": {"max_running_requests": 1024}}}, backend="sglang"),
        Workload("2t", "closed loop c256, 1024/1024, 2,000 requests, TensorRT-LLM", _closed(2000, 256, 1024, 1024),
                 workers={"aggregated": {"scheduler": {"max_batch_size": 1024}}}, backend="trtllm"),
        Workload("3", "closed loop c64, 8192/1024, 2,000 requests", _closed(2000, 64, 8192, 1024)),
        Workload("4", "Poisson overload (60 req/s, ~2.6x capacity), 1024/1024, 8,000 requests",
                 {"synthetic": {"num_requests": 8000, "input_length": 1024, "output_length": 1024},
                  "client": {"mode": "poisson", "rate": 60.0}}),
        Workload("5", "Mooncake conversation trace, 12,031 requests, prefix caching",
                 {"trace": str(mooncake), "format": "mooncake"}, needs=mooncake),
        Workload("5r", "Mooncake trace on 16 replicas behind a kv_aware router",
                 {"trace": str(mooncake), "format": "mooncake"}, needs=mooncake,
                 workers={"aggregated": {"count": 16, "scheduler": _SCHEDULER}},
                 router={"policy": "kv_aware"}),
        Workload("5d", "Mooncake trace on 4 prefill + 4 decode workers (P/D, KV transfers)",
                 {"trace": str(mooncake), "format": "mooncake"}, needs=mooncake,
                 workers={"prefill": {"count": 4, "scheduler": _SCHEDULER},
                          "decode": {"count": 4, "scheduler": _SCHEDULER}}),
        Workload("6", "1,000,000 requests, Poisson 20 req/s, lengths resampled from Azure conv",
                 {"synthetic": {"num_requests": 1_000_000, "lengths_from": str(azure)},
                  "client": {"mode": "poisson", "rate": 20.0}}, needs=azure),
    ]


def config_for(workload: Workload, timing: str) -> dict:
    timing_cfg = {"kind": "fixed", "pass_ms": 10.0} if timing == "fixed" else {"kind": timing}
    return {
        "model": "llama-3.1-8b",
        "gpu": "h100-sxm",
        "engine": {
            "backend": workload.backend,
            "timing": timing_cfg,
            "workers": workload.workers or {"aggregated": {"scheduler": dict(_SCHEDULER)}},
        },
        "workload": workload.workload,
        **({"router": workload.router} if workload.router else {}),
    }


def aisimulate_config(workload: Workload) -> dict | None:
    """The same row in AISimulate's `predict` config (0.13 dev build), or None if it has no counterpart.

    AISimulate's fixed timing charges prefill_ms for a pass with any prefill plus decode_ms
    for one with any decode; prefill 0 / decode 10 gives every pass that decodes 10 ms.
    """
    spec = workload.workload
    synthetic = spec.get("synthetic")
    if workload.backend != "vllm":
        return None   # compared on vLLM only
    if workload.key == "5":
        source = {"type": "trace", "format": "mooncake", "paths": [spec["trace"]], "block_size": 512}
        load = {"type": "trace_timestamps", "speedup": 1.0}
        stop = None
    elif synthetic is not None and "input_length" in synthetic:
        source = {"type": "synthetic", "input_tokens": synthetic["input_length"],
                  "output_tokens": synthetic["output_length"]}
        client = spec["client"]
        load = ({"type": "concurrency", "concurrency": client["concurrency"]} if client["mode"] == "closed_loop"
                else {"type": "poisson", "requests_per_second": client["rate"], "seed": 0})
        stop = {"requests": synthetic["num_requests"]}
    else:
        return None   # row 6 resamples lengths from a trace: no counterpart
    traffic = {"source": source, "load": load, **({"stop": stop} if stop else {})}
    return {
        "traffic": traffic,
        "engine": {
            "mode": "aggregated",
            # The bundled config of Llama-3.1-8B (its newer name needs a download).
            "model": "meta-llama/Meta-Llama-3.1-8B",
            "hardware": "h100_sxm",
            "backend": "vllm",
            "workers": {"aggregated": {
                "parallelism": {"tensor": 1, "pipeline": 1, "replicas": 1},
                "scheduler": {"max_sequences": 1024, "max_batched_tokens": 8192},
                "kv_cache": {"block_size": 16, "prefix_caching": True,
                             "capacity": {"type": "fixed", "blocks": 60000}},
                "timing": {"type": "fixed", "prefill_ms": 0.0, "decode_ms": 10.0},
            }},
        },
    }


def aisimulate_command(python: Path) -> list[str]:
    """AISimulate's CLI next to its interpreter, else `python -m aisimulate`."""
    script = python.parent / "aisimulate"
    return [str(script)] if script.exists() else [str(python), "-m", "aisimulate"]


def measure_aisimulate(workload: Workload, python: Path, repeat: int) -> float | None:
    """Median whole-process wall seconds of AISimulate's `predict` on the row."""
    config = aisimulate_config(workload)
    if config is None or workload.workers or (workload.needs is not None and not workload.needs.exists()):
        return None
    walls = []
    with tempfile.TemporaryDirectory(prefix="servesim-vs-aisim-") as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(dump_yaml(config))
        for i in range(repeat):
            cmd = [*aisimulate_command(python), "predict", "-c", str(path), "--output-dir",
                   str(Path(tmp) / f"out{i}"), "--overwrite", "--format", "json"]
            start = time.perf_counter()
            proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if proc.returncode != 0:
                raise RuntimeError(f"aisimulate failed ({proc.returncode}): {proc.stderr.decode().strip()[-500:]}")
            walls.append(time.perf_counter() - start)
    return statistics.median(walls)


@dataclass
class Measurement:
    wall_s: float
    loop_s: float
    peak_rss_mb: float
    requests: int
    output_tokens: int


def run_once(config_path: Path, out_dir: Path) -> Measurement:
    cmd = [sys.executable, "-m", "servesim", "run", str(config_path), "-q", "--out", str(out_dir)]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"servesim failed ({proc.returncode}): {stderr.strip()}")
    summary = json.loads((out_dir / "summary.json").read_text())
    return Measurement(wall, summary["wall_time_ms"] / 1e3, usage.ru_maxrss / 1024,
                       summary["completed"] + summary["failed_requests"], summary["total_output_tokens"])


def measure(workload: Workload, timing: str, repeat: int) -> Measurement | None:
    if workload.needs is not None and not workload.needs.exists():
        return None
    with tempfile.TemporaryDirectory(prefix="servesim-bench-") as tmp:
        config_path = Path(tmp) / "config.yaml"
        config_path.write_text(dump_yaml(config_for(workload, timing)))
        runs = [run_once(config_path, Path(tmp) / f"out{i}") for i in range(repeat)]
    walls = [r.wall_s for r in runs]
    return Measurement(statistics.median(walls), statistics.median(r.loop_s for r in runs),
                       max(r.peak_rss_mb for r in runs), runs[0].requests, runs[0].output_tokens)


def format_row(workload: Workload, timing: str, m: Measurement | None) -> str:
    if m is None:
        return f"| {workload.key} | {workload.title} | {timing} | (trace not found) | | | | | |"
    per_token = m.wall_s / m.output_tokens * 1e6
    loop_per_token = m.loop_s / m.output_tokens * 1e6
    return (f"| {workload.key} | {workload.title} | {timing} | {m.requests:,} | {m.output_tokens:,} | "
            f"{m.wall_s:.2f} | {per_token:.3f} | {loop_per_token:.3f} | {m.peak_rss_mb:.0f} |")


HEADER = ("| row | workload | timing | requests | output tokens | wall s (median) | µs/token (whole) | "
          "µs/token (loop) | peak RSS MB |\n|---|---|---|---|---|---|---|---|---|")


def _byte_compile() -> None:
    """Write servesim's bytecode once, as a regular `pip install` does.

    An editable install leaves it to the interpreter, which skips writing it where
    PYTHONDONTWRITEBYTECODE is set (as on our CI machines): every timed run would then
    compile servesim's sources again (~70 ms of start-up, not simulator speed).
    """
    import compileall

    compileall.compile_dir(str(Path(__file__).resolve().parent), quiet=1)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="comma-separated row keys (1a,2a,...); default all")
    parser.add_argument("--timing", default="fixed", help="comma-separated timing kinds (fixed, roofline)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--traces", type=Path, default=SHARED_TRACES, help="folder of shared/traces")
    parser.add_argument("--vs", nargs=2, metavar=("aisimulate", "PYTHON"),
                        help="also run AISimulate (the interpreter of its virtualenv) and print the ratio")
    args = parser.parse_args(argv)
    if args.vs and args.vs[0] != "aisimulate":
        parser.error("--vs supports: aisimulate PATH_TO_ITS_PYTHON")
    wanted = {k for k in args.only.split(",") if k}
    _byte_compile()
    title, rule = HEADER.split("\n")
    if args.vs:
        title, rule = title + " AISimulate wall s | speed-up |", rule + "---|---|"
    print(title + "\n" + rule, flush=True)
    for workload in workloads(args.traces):
        if wanted and workload.key not in wanted:
            continue
        for timing in [t for t in args.timing.split(",") if t]:
            mine = measure(workload, timing, args.repeat)
            row = format_row(workload, timing, mine)
            if args.vs:
                theirs = measure_aisimulate(workload, Path(args.vs[1]), args.repeat) if timing == "fixed" else None
                ratio = f"{theirs / mine.wall_s:.1f}x" if theirs and mine else ""
                row += f" {theirs:.2f} | {ratio} |" if theirs else " | |"
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
