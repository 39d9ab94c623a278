"""Fit the roofline model's efficiencies and overheads per GPU and backend.

    python benchmarks/fit_roofline.py [--only h100-sxm/vllm] [--evals 60] [--rows 18] [--start fitted]

Fits on ../shared/calibration/silicon_calibration.csv only (aggregated rows whose model
and GPU are catalogued), writing src/servesim/timing/data/roofline_fit.json. For each
(GPU, backend) it minimises the mean squared log error of mean TPOT plus half that of
mean TTFT over a stratified sample of its rows (rows in deep overload, TTFT over 20 s,
are left out: they measure queueing, not step time), with Nelder-Mead in log space
over six parameters: GEMM, memory and attention efficiency, and the per-pass,
per-layer and per-collective overheads.

Each evaluation replays the rows through the simulator with 3 requests per user
instead of 10 and extrapolates to 10: the first wave (request ids below the
concurrency) is weighted 1/10 and the later ones 9/10, as in the full recipe.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import defaultdict
from multiprocessing import Pool
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from calibration_rows import Row, load_rows, row_config  # noqa: E402

import servesim  # noqa: E402
from servesim.errors import ServesimError  # noqa: E402
from servesim.calibrate.search import (BOUNDS, PARAMS, START, nelder_mead, out_of_bounds,  # noqa: E402,F401
                                      run_loss, to_params)
from servesim.timing.roofline import RooflineProfile  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "src" / "servesim" / "timing" / "data" / "roofline_fit.json"
WAVES = 3


def extrapolated_means(row: Row, result) -> tuple[float, float]:
    """Mean TTFT and TPOT of the 10-wave recipe, from a run of WAVES waves."""
    table = result.requests
    ids = table.column("request_id")
    first_token = table.column("first_token_ns")
    arrival = table.column("arrival_ns")
    finish = table.column("finish_ns")
    out_len = table.column("output_length")
    ttft = (first_token - arrival) / 1e6
    tpot = np.where(out_len > 1, (finish - first_token) / np.maximum(out_len - 1, 1) / 1e6, np.nan)
    first = ids < row.concurrency
    later = ~first
    if row.warm_start:
        return float(ttft[later].mean()), float(np.nanmean(tpot[later]))
    ttft_mean = (ttft[first].sum() / 10 + ttft[later].mean() * row.concurrency * 9 / 10) / row.concurrency
    tpot_first = np.nanmean(tpot[first])
    tpot_later = np.nanmean(tpot[later])
    return float(ttft_mean), float(tpot_first / 10 + tpot_later * 9 / 10)


def evaluate(job):
    row, overrides = job
    config = row_config(row, requests_per_user=WAVES)
    config["engine"]["timing"].update(overrides)
    try:
        result = servesim.simulate(config)
    except ServesimError:
        return None
    return extrapolated_means(row, result)


def loss(pairs: list[tuple[Row, tuple[float, float] | None]]) -> float:
    return sum(run_loss(row.ttft_ms, row.tpot_ms, predicted) for row, predicted in pairs) / max(len(pairs), 1)


def sample(rows: list[Row], limit: int) -> list[Row]:
    """A spread of rows: sorted by (tp, concurrency, isl, osl), every k-th."""
    usable = [r for r in rows if r.ttft_ms < 20_000]
    usable.sort(key=lambda r: (r.tp * r.attention_dp, r.concurrency, r.isl, r.osl, r.model))
    if len(usable) <= limit:
        return usable
    step = len(usable) / limit
    return [usable[int(i * step)] for i in range(limit)]


def fit_group(name: str, rows: list[Row], pool: Pool, evals: int,
              start: dict | None = None, free: tuple[str, ...] = PARAMS) -> tuple[dict, float, float]:
    """Fit one group from the default profile, or from `start` (a profile fitted before); only
    the parameters in `free` move, the others keep their start values."""
    default = RooflineProfile()
    begin = {p: (start.get(p, getattr(default, p)) if start else getattr(default, p)) for p in PARAMS}
    # A parameter off by default (0) starts at a physical middle, inside the log-space search.
    begin = {p: START.get(p, v) if v <= 0 else v for p, v in begin.items()}
    begin = {p: min(max(v, BOUNDS[p][0]), BOUNDS[p][1]) for p, v in begin.items()}
    x0 = np.log([begin[p] for p in free])
    cache: dict[tuple, float] = {}

    def objective(x: np.ndarray) -> float:
        penalty = out_of_bounds(x, free)
        if penalty:
            return 10.0 + penalty
        params = {**begin, **to_params(x, free)}
        key = tuple(round(v, 6) for v in params.values())
        if key not in cache:
            predictions = pool.map(evaluate, [(row, params) for row in rows])
            cache[key] = loss(list(zip(rows, predictions)))
        return cache[key]

    start_loss = objective(x0)
    best, best_loss = nelder_mead(objective, x0, evals)
    # Written: the parameters fitted now or before (one never fitted keeps its built-in value).
    kept = {p: v for p, v in begin.items() if p in free or (start and p in start) or not start}
    return {**kept, **to_params(best, free)}, start_loss, best_loss


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="fit only this gpu/backend")
    parser.add_argument("--evals", type=int, default=60)
    parser.add_argument("--rows", type=int, default=18)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--params", default=",".join(PARAMS),
                        help="comma-separated parameters to fit; the others keep their start values")
    parser.add_argument("--start", choices=("default", "fitted"), default="default",
                        help="start each group from the default profile, or from its shipped fit "
                             "(to carry a fit over a change of the model's physics)")
    args = parser.parse_args(argv)
    rows, _ = load_rows()
    by_group: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        by_group[f"{row.gpu}/{row.backend}"].append(row)
    existing = json.loads(OUT.read_text()) if OUT.exists() else {}
    profiles = existing.get("profiles", {})
    report = existing.get("fit", {})
    with Pool(args.workers) as pool:
        for name in sorted(by_group):
            if args.only and name != args.only:
                continue
            chosen = sample(by_group[name], args.rows)
            t0 = time.perf_counter()
            start = profiles.get(name) if args.start == "fitted" else None
            free = tuple(p for p in PARAMS if p in args.params.split(","))
            params, before, after = fit_group(name, chosen, pool, args.evals, start, free)
            profiles[name] = params
            report[name] = {"rows": len(chosen), "start": args.start, "fitted": list(free),
                            "loss_start": round(before, 4),
                            "loss_fitted": round(after, 4), "seconds": round(time.perf_counter() - t0)}
            print(f"{name}: {len(chosen)} rows, loss {before:.3f} -> {after:.3f} "
                  f"({time.perf_counter() - t0:.0f} s) {params}", flush=True)
            _write(profiles, report)
    # Fallbacks for a GPU or backend without rows of its own: the geometric mean over groups.
    for backend in ("vllm", "sglang", "trtllm", "*"):
        names = [n for n in profiles if "*" not in n and (backend == "*" or n.endswith("/" + backend))]
        if names:
            # Over the groups that fitted the parameter (a vLLM group has no eager prefill to fit).
            profiles[f"*/{backend}"] = {
                p: float(math.exp(np.mean([math.log(profiles[n][p]) for n in names if p in profiles[n]])))
                for p in PARAMS if any(p in profiles[n] for n in names)
            }
    _write(profiles, report)
    return 0


def _write(profiles: dict, report: dict) -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "about": "Roofline efficiencies and overheads per GPU/backend, fitted by benchmarks/fit_roofline.py on "
                 "../shared/calibration/silicon_calibration.csv (a 30% sample of aiconfigurator-core 0.12.0's "
                 "silicon_sample.csv, Apache-2.0). Keys '*/<backend>' and '*/*' are geometric means used as fallbacks.",
        "profiles": dict(sorted(profiles.items())),
        "fit": dict(sorted(report.items())),
    }
    OUT.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
