"""Accuracy against measured serving: python benchmarks/accuracy.py [--out predictions.csv] [--only MODEL].

Replays every row of ../shared/calibration/silicon_calibration.csv whose model and GPU are
catalogued (aggregated and disaggregated; client recipe in calibration_rows.py and
docs/accuracy.md) on the row's own backend, with the default roofline timing, and prints
the median and 90th-percentile absolute percentage error of mean TTFT and mean TPOT per
(model, GPU, backend, mode) group, per backend and mode, and overall.

`--waves 3` replays 3 requests per user instead of the recipe's 10 and extrapolates the
means to 10 waves (first wave weighted 1/10, later ones 9/10, as fit_roofline.py does):
about a third of the cost, within a few percent of the full replay.

`--max-row-seconds S` leaves out rows whose replay would take longer than S seconds of
simulator time on this machine, estimated before running from the decode work they hold
(requests × output tokens: SGLang and TensorRT-LLM are scheduled per request, estimated at
2.5 µs a token here when aggregated, about 3× what replays of such rows measure since runs of
identical decode passes are fast-forwarded, and 10 µs under disaggregation, where transfers cut
those runs short; vLLM's steady passes are aggregates), and stops any row that still runs
past 3 × S. The longest rows (4,096 users × 8,192 output tokens on TensorRT-LLM) take many
minutes each; the report says how many rows were left out, by backend and mode. The estimate
is deliberately high (rows kept at S = 20 took about a third of their estimate).
"""

from __future__ import annotations

import argparse
import csv
import signal
import statistics
import sys
import time
from multiprocessing import Pool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from calibration_rows import load_rows, row_config  # noqa: E402
from fit_roofline import extrapolated_means  # noqa: E402

import servesim  # noqa: E402
from servesim.errors import ServesimError  # noqa: E402

DENSE = ("llama-3.1-8b", "llama-3.1-70b", "qwen3-32b")


# Aggregated SGLang and TensorRT-LLM replays fast-forward runs of decode passes; under
# disaggregation transfers and prefill handoffs cut those runs short.
PER_TOKEN_S = {("vllm", "agg"): 0.5e-6, ("vllm", "disagg"): 0.5e-6,
               ("sglang", "agg"): 2.5e-6, ("trtllm", "agg"): 2.5e-6,
               ("sglang", "disagg"): 10e-6, ("trtllm", "disagg"): 10e-6}


def estimated_seconds(row, requests_per_user: int) -> float:
    """Simulator time a row's replay takes here, roughly: its decode work at the backend's cost."""
    return 0.3 + row.concurrency * requests_per_user * row.osl * PER_TOKEN_S.get((row.backend, row.mode), 20e-6)


class RowTimeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise RowTimeout


def predict(args):
    index, row, requests_per_user, limit_s = args
    start = time.perf_counter()
    if limit_s:
        signal.signal(signal.SIGALRM, _on_alarm)
        signal.alarm(int(limit_s) + 1)
    try:
        result = servesim.simulate(row_config(row, requests_per_user))
    except ServesimError as err:
        return index, None, None, str(err), time.perf_counter() - start
    except RowTimeout:
        return index, None, None, f"stopped after {limit_s:.0f} s", time.perf_counter() - start
    finally:
        if limit_s:
            signal.alarm(0)
    if requests_per_user < 10:
        ttft, tpot = extrapolated_means(row, result)
    else:
        ttft, tpot = result.summary["mean_ttft_ms"], result.summary["mean_tpot_ms"]
    return index, ttft, tpot, "", time.perf_counter() - start


def ape(predicted: float, measured: float) -> float:
    return abs(predicted - measured) / measured * 100


def quantile(values: list[float], q: float) -> float:
    values = sorted(values)
    if not values:
        return float("nan")
    pos = q * (len(values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def report(title: str, pairs: list[tuple[float, float, float, float]]) -> str:
    ttft = [ape(p, m) for p, m, _, _ in pairs]
    tpot = [ape(p, m) for _, _, p, m in pairs]
    return (f"| {title} | {len(pairs)} | {quantile(ttft, .5):.1f} | {quantile(ttft, .9):.1f} | "
            f"{quantile(tpot, .5):.1f} | {quantile(tpot, .9):.1f} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("accuracy_predictions.csv"))
    parser.add_argument("--only", default="", help="substring of model / gpu / backend to keep")
    parser.add_argument("--waves", "--requests-per-user", dest="requests_per_user", type=int, default=10)
    parser.add_argument("--mode", default="all", choices=["agg", "disagg", "all"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-row-seconds", type=float, default=0.0,
                        help="leave out rows estimated to take longer (0: run every row)")
    args = parser.parse_args(argv)
    rows, skipped = load_rows(mode=args.mode)
    rows = [r for r in rows if args.only in r.group]
    cap = args.max_row_seconds
    kept, left_out = [], []
    for row in rows:
        (left_out if cap and estimated_seconds(row, args.requests_per_user) > cap else kept).append(row)
    rows = kept
    # Cheapest first, so a long row never holds the others back.
    jobs = sorted(((i, r, args.requests_per_user, 3 * cap) for i, r in enumerate(rows)),
                  key=lambda job: estimated_seconds(job[1], job[2]))
    results = {}
    with Pool(args.workers) as pool:
        for index, ttft, tpot, error, wall in pool.imap_unordered(predict, jobs):
            results[index] = (ttft, tpot, error, wall)
    with open(args.out, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "mode", "model", "gpu", "backend", "precision", "tp", "attention_dp", "ep", "concurrency",
                         "isl", "osl", "silicon_ttft_ms", "predicted_ttft_ms", "silicon_tpot_ms",
                         "predicted_tpot_ms", "error", "wall_s"])
        for i, row in enumerate(rows):
            ttft, tpot, error, wall = results[i]
            writer.writerow([row.raw["id"], row.mode, row.model, row.gpu, row.backend, row.precision, row.tp,
                             row.attention_dp, row.ep, row.concurrency, row.isl, row.osl, row.ttft_ms, ttft,
                             row.tpot_ms, tpot, error, f"{wall:.2f}"])
    groups: dict[str, list] = {}
    backends: dict[str, list] = {}
    ok = [(r, results[i]) for i, r in enumerate(rows) if results[i][0] is not None]
    for row, (ttft, tpot, _, _) in ok:
        pair = (ttft, row.ttft_ms, tpot, row.tpot_ms)
        groups.setdefault(row.group, []).append(pair)
        backends.setdefault(f"{row.backend} {row.mode}", []).append(pair)
    print("| group | rows | TTFT median APE % | TTFT p90 APE % | TPOT median APE % | TPOT p90 APE % |")
    print("|---|---|---|---|---|---|")
    for name in sorted(groups):
        print(report(name, groups[name]))
    for name in sorted(backends):
        print(report(f"all {name} rows", backends[name]))
    dense = [p for row, (ttft, tpot, _, _) in ok for p in [(ttft, row.ttft_ms, tpot, row.tpot_ms)]
             if row.model in DENSE]
    dense_vllm = [p for row, (ttft, tpot, _, _) in ok for p in [(ttft, row.ttft_ms, tpot, row.tpot_ms)]
                  if row.model in DENSE and row.backend == "vllm"]
    print(report("dense models (Llama-3.1-8B/70B, Qwen3-32B), all backends", dense))
    print(report("dense models, vLLM rows", dense_vllm))
    for mode in ("agg", "disagg"):
        print(report(f"all catalogued {mode} rows", [(res[0], r.ttft_ms, res[1], r.tpot_ms)
                                                      for r, res in ok if r.mode == mode]))
    # Most disaggregated rows give no worker counts: InferenceX's published sweep configs give
    # many of them (pd_topologies.csv); the rest run one prefill and one decode worker.
    for topology, words in (("row", "with worker counts in the source"),
                            ("published", "with the published sweep's topology"),
                            ("assumed", "without a known topology (1 prefill + 1 decode)")):
        print(report(f"disagg rows {words}", [(res[0], r.ttft_ms, res[1], r.tpot_ms) for r, res in ok
                                               if r.mode == "disagg" and r.topology == topology]))
    failed = [(r, results[i][2]) for i, r in enumerate(rows) if results[i][0] is None]
    print(f"\n{len(ok)} rows predicted, {len(failed)} failed, {len(skipped)} rows skipped (model or GPU not "
          f"catalogued); total simulator wall {sum(res[3] for res in results.values()):.0f} s; "
          f"predictions in {args.out}")
    for row, error in failed[:10]:
        print(f"  failed {row.raw['id']}: {error}")
    if left_out:
        counts: dict[str, int] = {}
        for row in left_out:
            counts[f"{row.backend} {row.mode}"] = counts.get(f"{row.backend} {row.mode}", 0) + 1
        print(f"{len(left_out)} rows left out as estimated over {cap:.0f} s each: "
              + ", ".join(f"{n} {name}" for name, n in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
