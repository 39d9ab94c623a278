"""The sweep benchmark: 240 trials of Llama-3.1-70B on H100 over a real trace, pool and Ray.

    python benchmarks/sweep_70b.py [--workers 2] [--ray] [--out sweeps/bench70b]

Sweeps sweep_70b_space.yaml (TP × replicas × max_num_seqs × max_num_batched_tokens ×
aggregated vs prefill/decode) over sweep_70b.yaml (the first 1,200 requests of the Azure
2023 conversation trace at twice their pace, roofline step times) in a local process
pool, prints the ranked table and the wall time; with --ray runs the same sweep on a
local Ray instance and checks every trial's result is identical (summaries compared
without their wall-clock field). Needs ../shared/traces beside the repository.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from servesim.sweep.executor import RayExecutor, make_executor
from servesim.sweep.report import build_report, print_report, write_outputs
from servesim.sweep.runner import load_base, run_sweep
from servesim.sweep.space import load_space

HERE = Path(__file__).resolve().parent


def comparable(result) -> dict:
    out = {}
    for trial_id, row in result.store.rows().items():
        summary = row["summary"] and {k: v for k, v in row["summary"].items() if k != "wall_time_ms"}
        out[trial_id] = json.dumps({**{k: v for k, v in row.items() if k not in ("wall_time_s", "session")},
                                    "summary": summary}, sort_keys=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ray", action="store_true", help="also run the sweep on a local Ray instance and compare")
    parser.add_argument("--out", type=Path, default=Path("sweeps") / "bench70b")
    args = parser.parse_args(argv)
    base = load_base(HERE / "sweep_70b.yaml")
    space = load_space(HERE / "sweep_70b_space.yaml")
    runs = {}
    for name in ["pool"] + (["ray"] if args.ray else []):
        out = args.out / name
        shutil.rmtree(out, ignore_errors=True)
        start = time.perf_counter()
        executor = RayExecutor(None, args.workers) if name == "ray" else make_executor(args.workers, None, False)
        ready = time.perf_counter()
        try:
            result = run_sweep(base, space, out, executor)
        finally:
            executor.close()
        wall = time.perf_counter() - start
        ok = sum(1 for r in result.rows.values() if r["status"] == "ok")
        report = build_report(result)
        write_outputs(result, report, out, "Llama-3.1-70B on H100-SXM, Azure conversation trace (1,200 requests, 2x)")
        if name == "pool":
            print_report(result, report, top=10)
        print(f"{name}: {len(result.rows)} trials ({ok} ran, {len(result.rows) - ok} failed) in {wall:.1f} s "
              f"wall ({ready - start:.1f} s of it starting {executor.description}); files in {out}")
        runs[name] = comparable(result)
        result.store.close()
    if args.ray:
        same = runs["pool"] == runs["ray"]
        differing = [t for t in runs["pool"] if runs["pool"][t] != runs["ray"].get(t)]
        print("pool and Ray trial results: " + ("identical" if same else f"{len(differing)} differ: {differing[:10]}"))
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
