"""The speed benchmark suite (`servesim bench`, `python benchmarks/speed.py`).

Every row runs the whole `servesim run` process (start-up included) on one
deployment: Llama-3.1-8B on one H100-SXM worker, vLLM, max_num_seqs 1024,
num_gpu_blocks 60000, with fixed 10 ms passes. Wall time is the median of
`repeat` runs; peak RSS is the largest of them.
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
        Workload("3", "closed loop c64, 8192/1024, 2,000 requests", _closed(2000, 64, 8192, 1024)),
        Workload("4", "Poisson overload (60 req/s, ~2.6x capacity), 1024/1024, 8,000 requests",
                 {"synthetic": {"num_requests": 8000, "input_length": 1024, "output_length": 1024},
                  "client": {"mode": "poisson", "rate": 60.0}}),
        Workload("5", "Mooncake conversation trace, 12,031 requests, prefix caching",
                 {"trace": str(mooncake), "format": "mooncake"}, needs=mooncake),
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
            "backend": "vllm",
            "timing": timing_cfg,
            "workers": {"aggregated": {"scheduler": {"max_num_seqs": 1024, "num_gpu_blocks": 60000}}},
        },
        "workload": workload.workload,
    }


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


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="comma-separated row keys (1a,2a,...); default all")
    parser.add_argument("--timing", default="fixed", help="comma-separated timing kinds (fixed, roofline)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--traces", type=Path, default=SHARED_TRACES, help="folder of shared/traces")
    args = parser.parse_args(argv)
    wanted = {k for k in args.only.split(",") if k}
    print(HEADER, flush=True)
    for workload in workloads(args.traces):
        if wanted and workload.key not in wanted:
            continue
        for timing in [t for t in args.timing.split(",") if t]:
            print(format_row(workload, timing, measure(workload, timing, args.repeat)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
