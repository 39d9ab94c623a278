"""Where each low-concurrency row's TTFT goes: python benchmarks/ttft_decomposition.py [--max-users 4]
[--before FIT.json] [--out rows.csv]

Replays the aggregated calibration rows with at most `--max-users` users (calibration_rows.py's
recipe, 3 waves extrapolated to 10 as fit_roofline.py does) and splits the predicted mean TTFT
into requests.csv's parts: the request path, the wait for the first pass that schedules the
request (passes waited: the pass in flight, polling, batch waits), and the prefill (that pass
to the first token). With `--before FIT.json` (an earlier roofline_fit.json) each row also runs
as servesim did before issue 20: that fit's profile pinned, no request path, no expert or
eager-prefill terms, no batch waiting. Prints, per backend, the median of each part, of the
predicted and measured TTFT, and of their ratio.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from multiprocessing import Pool
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from calibration_rows import load_rows, row_config  # noqa: E402

import servesim  # noqa: E402
from servesim.errors import ServesimError  # noqa: E402

WAVES = 3
PARTS = ("request_path", "queue", "prefill")
OLD_PARAMS = ("gemm_efficiency", "memory_efficiency", "attention_efficiency", "pass_overhead_ms",
              "per_layer_overhead_us", "comm_latency_us")


def _weighted(values: np.ndarray, first: np.ndarray, users: int) -> float:
    """The 10-wave mean from a 3-wave run: the first wave weighs 1/10, the later ones 9/10."""
    return float((values[first].sum() / 10 + values[~first].mean() * users * 9 / 10) / users)


def parts_of(result, users: int) -> dict[str, float]:
    table = result.requests
    col = table.column
    arrival, first_token = col("arrival_ns"), col("first_token_ns")
    engine, outbound, scheduled = col("engine_arrival_ns"), col("outbound_ns"), col("first_scheduled_ns")
    first = col("request_id") < users
    parts = {
        "ttft": (first_token - arrival) / 1e6,
        "request_path": (engine - arrival + outbound) / 1e6,
        "queue": (scheduled - engine) / 1e6,
        "prefill": (first_token - outbound - scheduled) / 1e6,
    }
    return {name: _weighted(values, first, users) for name, values in parts.items()}


def before_config(row, fit: dict) -> dict:
    config = row_config(row, requests_per_user=WAVES)
    profiles = fit["profiles"]
    profile = next(profiles[k] for k in (f"{row.gpu}/{row.backend}", f"*/{row.backend}", "*/*") if k in profiles)
    config["engine"]["timing"].update({p: profile[p] for p in OLD_PARAMS}, expert_efficiency=1.0,
                                      eager_moe_layer_us=0.0)
    config["engine"]["request_path"] = {"enabled": False}
    for role in config["engine"]["workers"].values():
        for key in ("batch_wait_timeout_iters", "batch_wait_max_tokens_ratio"):
            role["scheduler"].pop(key, None)
        if row.backend == "trtllm":
            role["scheduler"]["max_num_tokens"] = max(8192, role["scheduler"]["max_batch_size"])
    return config


def replay(job) -> dict | None:
    row, fit = job
    out = {"id": row.raw["id"], "backend": row.backend, "model": row.model, "gpu": row.gpu,
           "users": row.concurrency, "isl": row.isl, "measured_ttft": row.ttft_ms}
    try:
        after = servesim.simulate(row_config(row, requests_per_user=WAVES))
        out.update({f"after_{k}": v for k, v in parts_of(after, row.concurrency).items()})
        if fit is not None:
            before = servesim.simulate(before_config(row, fit))
            out.update({f"before_{k}": v for k, v in parts_of(before, row.concurrency).items()})
    except ServesimError:
        return None
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-users", type=int, default=4)
    parser.add_argument("--before", type=Path, help="an earlier roofline_fit.json to replay as before")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    fit = json.loads(args.before.read_text()) if args.before else None
    rows, _ = load_rows()
    chosen = [r for r in rows if r.concurrency <= args.max_users and r.ttft_ms < 20_000]
    with Pool(args.workers) as pool:
        results = [r for r in pool.map(replay, [(row, fit) for row in chosen]) if r is not None]
    if args.out:
        with open(args.out, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(results[0]))
            writer.writeheader()
            writer.writerows(results)
    phases = ("before", "after") if fit is not None else ("after",)
    print(f"| backend | rows | measured TTFT ms | " + " | ".join(
        f"{p}: predicted ms, ratio, path / queue / prefill ms" for p in phases) + " |")
    print("|---|---|---|" + "---|" * len(phases))
    for backend in sorted({r["backend"] for r in results}):
        mine = [r for r in results if r["backend"] == backend]
        cells = [backend, str(len(mine)), f"{statistics.median(r['measured_ttft'] for r in mine):.0f}"]
        for phase in phases:
            med = {k: statistics.median(r[f"{phase}_{k}"] for r in mine) for k in ("ttft", *PARTS)}
            ratio = statistics.median(r[f"{phase}_ttft"] / r["measured_ttft"] for r in mine)
            cells.append(f"{med['ttft']:.0f}, {ratio:.2f}, " + " / ".join(f"{med[k]:.1f}" for k in PARTS))
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
