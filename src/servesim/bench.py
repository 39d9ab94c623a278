"""The speed benchmark suite (`servesim bench`, `python benchmarks/speed.py`).

Every row runs the whole `servesim run` process (start-up included) on one
deployment: Llama-3.1-8B on B200 workers, vLLM, max_num_seqs 1024, num_gpu_blocks
60000, max_num_batched_tokens 8192, with fixed 10 ms passes (or the roofline model): one worker,
except rows 5r (16 replicas, kv_aware router) and 5d (4 prefill + 4 decode workers). Rows 2s
and 2t run a shorter row 2a on SGLang and TensorRT-LLM on H100-SXM workers (same batch limit,
their default KV pools), whose per-request schedulers fast-forward only their steady runs of decode passes.
Wall time is the median of `repeat` runs; peak RSS is the largest of them.

Rows 5, 5r, 5d and 6 read the shared traces (`--traces DIR`, the folder holding mooncake/
and azure_llm_2023/; by default shared/traces beside a source checkout, when there is one).
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

from servesim.engine.registry import DEFAULT_BACKEND
from servesim.errors import ServesimError
from servesim.yaml_io import dump_yaml

TIMINGS = ("fixed", "roofline", "aic")   # the timing kinds a row runs without further settings
TRACE_FILES = {"mooncake": Path("mooncake") / "conversation_trace.jsonl",
               "azure": Path("azure_llm_2023") / "AzureLLMInferenceTrace_conv.csv"}


def default_traces() -> Path | None:
    """shared/traces beside the source checkout this module runs from, or None when installed.

    In a checkout this file is <checkout>/src/servesim/bench.py and the traces sit in
    <checkout>/../shared/traces; an installed package (site-packages/servesim/) has neither.
    """
    here = Path(__file__).resolve()
    checkout = here.parents[2]
    if here.parents[1].name != "src" or not (checkout / "pyproject.toml").is_file():
        return None
    traces = checkout.parent / "shared" / "traces"
    return traces if traces.is_dir() else None


SHARED_TRACES = default_traces()


@dataclass
class Workload:
    key: str
    title: str
    workload: dict
    needs: Path | None = None   # a trace file this row needs
    workers: dict | None = None  # engine.workers, when not the single aggregated worker
    router: dict | None = None
    backend: str = DEFAULT_BACKEND
    gpu: str = "b200"           # _VLLM_GPU (below); rows 2s and 2t run on an H100, for its default KV pools
    aisimulate: bool = True     # has a counterpart row in AISimulate's predict (servesim/bench_vs.py)
    recommend: bool = False     # the row is the README's `servesim recommend` example, not one `run`


# 60,000 blocks of 16 tokens of Llama-3.1-8B KV cache take 117 GiB: more than an H100 leaves after the
# weights (servesim checks it), so the vLLM rows run on B200s, whose 180 GB hold them. Under fixed
# timing the GPU matters only through vLLM's default token budget (16,384 on a B200), pinned here to
# the 8,192 it is on an H100, so under fixed timing the rows schedule the passes an H100 deployment would.
_SCHEDULER = {"max_num_seqs": 1024, "num_gpu_blocks": 60000, "max_num_batched_tokens": 8192}
_VLLM_GPU = "b200"


def _closed(n: int, concurrency: int, isl: int, osl: int) -> dict:
    return {"synthetic": {"num_requests": n, "input_length": isl, "output_length": osl},
            "client": {"mode": "closed_loop", "concurrency": concurrency}}


def workloads(traces: Path | None = None) -> list[Workload]:
    """Every row; rows that read a trace look for it under `traces` (default: `default_traces()`)."""
    root = traces if traces is not None else (SHARED_TRACES or Path("shared") / "traces")
    mooncake, azure = root / TRACE_FILES["mooncake"], root / TRACE_FILES["azure"]
    return [
        Workload("1a", "closed loop c64, 1024/1024, 2,000 requests", _closed(2000, 64, 1024, 1024)),
        Workload("1b", "closed loop c64, 1024/1024, 8,000 requests", _closed(8000, 64, 1024, 1024)),
        Workload("2a", "closed loop c256, 1024/1024, 8,000 requests", _closed(8000, 256, 1024, 1024)),
        Workload("2b", "closed loop c256, 1024/1024, 32,000 requests", _closed(32000, 256, 1024, 1024)),
        Workload("2s", "closed loop c256, 1024/1024, 2,000 requests, SGLang", _closed(2000, 256, 1024, 1024),
                 workers={"aggregated": {"scheduler": {"max_running_requests": 1024}}}, backend="sglang",
                 gpu="h100-sxm"),
        Workload("2t", "closed loop c256, 1024/1024, 2,000 requests, TensorRT-LLM", _closed(2000, 256, 1024, 1024),
                 workers={"aggregated": {"scheduler": {"max_batch_size": 1024}}}, backend="trtllm",
                 gpu="h100-sxm"),
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
        Workload("7", "20,000 chat sessions of 5 turns (100,000 requests), Poisson 20 sessions/s",
                 {"sessions": {"num_sessions": 20000, "turns": 5, "first_input_length": {"min": 256, "max": 2048},
                               "input_length": {"min": 32, "max": 256}, "output_length": {"min": 32, "max": 256},
                               "think_time": {"distribution": "exponential", "mean_s": 5.0}},
                  "client": {"mode": "poisson", "rate": 20.0}}, aisimulate=False),
        Workload("8", "README recommend: Llama-3.1-70B, 16 H100s, Azure conv at 2x, 2,000 requests (336 trials)",
                 {"trace": str(azure), "format": "azure", "client": {"mode": "open_loop", "time_scale": 0.5}},
                 needs=azure, aisimulate=False, recommend=True),
    ]


def config_for(workload: Workload, timing: str) -> dict:
    timing_cfg = {"kind": "fixed", "pass_ms": 10.0} if timing == "fixed" else {"kind": timing}
    return {
        "model": "llama-3.1-8b",
        "gpu": workload.gpu,
        "engine": {
            "backend": workload.backend,
            "timing": timing_cfg,
            "workers": workload.workers or {"aggregated": {"scheduler": dict(_SCHEDULER)}},
        },
        "workload": workload.workload,
        **({"router": workload.router} if workload.router else {}),
    }


@dataclass
class Measurement:
    wall_s: float
    loop_s: float
    peak_rss_mb: float
    requests: int
    output_tokens: int
    cpu_s: float = 0.0   # user + system time of the process
    recommended: str = ""   # the recommend row's "Recommended: ..." line


def timed_process(cmd: list[str], stdout=subprocess.DEVNULL):
    """(wall s, exit status, stderr, rusage) of one process, with its own rusage (not this process's).

    The rusage wait4 returns counts the process's reaped children too (a sweep's worker pool).
    """
    with tempfile.TemporaryFile() as err_fh:   # a file, not a pipe: a chatty run cannot block on it
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=stdout, stderr=err_fh)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        err_fh.seek(0)
        stderr = err_fh.read().decode(errors="replace")
    return wall, os.waitstatus_to_exitcode(status), stderr, usage


def run_once(config_path: Path, out_dir: Path) -> Measurement:
    cmd = [sys.executable, "-m", "servesim", "run", str(config_path), "-q", "--out", str(out_dir)]
    wall, returncode, stderr, usage = timed_process(cmd)
    if returncode != 0:
        last = stderr.strip().splitlines()[-1] if stderr.strip() else "no message"
        raise ServesimError(f"servesim run exited {returncode}: {last}")
    summary = json.loads((out_dir / "summary.json").read_text())
    return Measurement(wall, summary["wall_time_ms"] / 1e3, usage.ru_maxrss / 1024,
                       summary["completed"] + summary["failed_requests"], summary["total_output_tokens"],
                       usage.ru_utime + usage.ru_stime)


RECOMMEND_ARGS = ["--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--gpus", "16",
                  "--slo", "ttft_ms=2000,tpot_ms=60"]


def recommend_once(workload_path: Path, out_dir: Path) -> Measurement:
    """One whole `servesim recommend` process; `requests` counts its trials, `recommended` is its answer."""
    cmd = [sys.executable, "-m", "servesim", "recommend", *RECOMMEND_ARGS, "--workload", str(workload_path),
           "--out", str(out_dir)]
    with tempfile.TemporaryFile() as out_fh:
        wall, returncode, stderr, usage = timed_process(cmd, stdout=out_fh)
        out_fh.seek(0)
        printed = out_fh.read().decode(errors="replace")
    if returncode != 0:
        last = stderr.strip().splitlines()[-1] if stderr.strip() else "no message"
        raise ServesimError(f"servesim recommend exited {returncode}: {last}")
    answer = next((line for line in printed.splitlines() if line.startswith("Recommended:")), "no recommendation")
    trials = sum(1 for _ in (out_dir / "trials.csv").open()) - 1
    return Measurement(wall, wall, usage.ru_maxrss / 1024, trials, 0, usage.ru_utime + usage.ru_stime,
                       recommended=answer)


def _run_row_once(workload: Workload, timing: str, tmp: Path, index: int) -> Measurement:
    if workload.recommend:
        path = tmp / "workload.yaml"
        if not path.exists():
            path.write_text(dump_yaml({"workload": workload.workload}))
        return recommend_once(path, tmp / f"out{index}")
    config_path = tmp / "config.yaml"
    if not config_path.exists():
        config_path.write_text(dump_yaml(config_for(workload, timing)))
    return run_once(config_path, tmp / f"out{index}")


def measure(workload: Workload, timing: str, repeat: int) -> Measurement:
    """The row's median wall time over `repeat` runs (its trace must be there: `select_rows`)."""
    with tempfile.TemporaryDirectory(prefix="servesim-bench-") as tmp:
        try:
            runs = [_run_row_once(workload, timing, Path(tmp), i) for i in range(repeat)]
        except ServesimError as err:
            raise ServesimError(f"bench row {workload.key} ({timing} timing) failed: {err}") from None
    return Measurement(statistics.median(r.wall_s for r in runs), statistics.median(r.loop_s for r in runs),
                       max(r.peak_rss_mb for r in runs), runs[0].requests, runs[0].output_tokens,
                       statistics.median(r.cpu_s for r in runs), recommended=runs[0].recommended)


def format_row(workload: Workload, timing: str, m: Measurement) -> str:
    if workload.recommend:
        return (f"| {workload.key} | {workload.title} | roofline | {m.requests:,} trials | — | "
                f"{m.wall_s:.2f} | — | — | {m.peak_rss_mb:.0f} |")
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
    compile servesim's sources again (~70 ms of start-up, not simulator speed). quiet=2:
    an installed package's folder may be read-only, and the table owns stdout.
    """
    import compileall

    compileall.compile_dir(str(Path(__file__).resolve().parent), quiet=2)


def _split(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _missing_trace(workload: Workload) -> bool:
    return workload.needs is not None and not workload.needs.is_file()


def select_rows(only: str, traces: Path | None) -> tuple[list[Workload], list[Workload]]:
    """(rows to run, rows skipped for want of their trace) for `--only` and `--traces`.

    Rows named in `only` must all be runnable (an unknown key or a missing trace is an
    error); with no `only`, every row runs that can and the others are skipped.
    """
    if traces is not None and not traces.is_dir():
        raise ServesimError(f"--traces {traces} is not a folder; give the folder holding "
                            f"{TRACE_FILES['mooncake'].parent}/ and {TRACE_FILES['azure'].parent}/")
    rows = workloads(traces)
    keys = [w.key for w in rows]
    wanted = _split(only)
    unknown = [k for k in wanted if k not in keys]
    if unknown:
        raise ServesimError(f"--only: unknown row {', '.join(unknown)}; the rows are {', '.join(keys)}")
    if not wanted:
        return [w for w in rows if not _missing_trace(w)], [w for w in rows if _missing_trace(w)]
    chosen = [w for w in rows if w.key in wanted]
    missing = [w for w in chosen if _missing_trace(w)]
    if missing:
        w = missing[0]
        raise ServesimError(f"bench row {w.key} needs the trace {w.needs}, which is not there; "
                            f"give --traces DIR, the folder holding {TRACE_FILES['mooncake'].parent}/ "
                            f"and {TRACE_FILES['azure'].parent}/")
    return chosen, []


def _skipped_note(skipped: list[Workload], traces: Path | None) -> str:
    where = traces or SHARED_TRACES
    found = f"not in {where}" if where is not None else "not found (no shared/traces beside a checkout)"
    return (f"note: skipped rows {', '.join(w.key for w in skipped)}: their traces are {found}; "
            "give --traces DIR to run them")


def run_suite(only: str = "", timing: str = "fixed", repeat: int = 3, traces: Path | None = None,
              vs: tuple[str, str] | None = None) -> int:
    """Print the suite's Markdown table on stdout (`servesim bench`); notes go to stderr."""
    timings = _split(timing)
    bad = [t for t in timings if t not in TIMINGS]
    if bad or not timings:
        raise ServesimError(f"--timing: unknown timing kind {', '.join(bad) or repr(timing)}; "
                            f"choose from {', '.join(TIMINGS)}")
    if repeat < 1:
        raise ServesimError(f"--repeat must be at least 1, got {repeat}")
    if vs is not None and vs[0] != "aisimulate":
        raise ServesimError(f"--vs {vs[0]}: only aisimulate is supported (--vs aisimulate PATH_TO_ITS_PYTHON)")
    chosen, skipped = select_rows(only, traces)
    if skipped:
        sys.stderr.write(_skipped_note(skipped, traces) + "\n")
    _byte_compile()
    if vs:
        return _run_vs(chosen, timings, repeat, Path(vs[1]))
    print(HEADER, flush=True)
    for workload in chosen:
        for kind in (timings[:1] if workload.recommend else timings):
            m = measure(workload, kind, repeat)
            print(format_row(workload, kind, m), flush=True)
            if workload.recommend:
                sys.stderr.write(f"row {workload.key}: {m.recommended}\n")
    return 0


def _run_vs(chosen: list[Workload], timings: list[str], repeat: int, python: Path) -> int:
    """Each row with a counterpart, `repeat` interleaved pairs against AISimulate (fixed timing only)."""
    from servesim.bench_vs import VS_HEADER, format_pairs, measure_pairs

    if timings != ["fixed"]:
        sys.stderr.write("note: --vs compares fixed timing only (AISimulate's fixed prefill/decode pass times)\n")
    print(VS_HEADER, flush=True)
    for workload in chosen:
        try:
            result = measure_pairs(workload, config_for(workload, "fixed"), python, repeat)
        except ServesimError as err:
            raise ServesimError(f"bench row {workload.key} against AISimulate failed: {err}") from None
        if result is None:
            sys.stderr.write(f"note: row {workload.key} has no AISimulate counterpart\n")
            continue
        print(format_pairs(workload, result), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python benchmarks/speed.py [options]`: the same as `servesim bench [options]`."""
    from servesim.cli_app import app
    from servesim.cli_usage import run_app

    return run_app(app, ["bench", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
