"""Does `servesim calibrate` generalise? Calibrate on half of a (GPU, backend)'s calibration rows, predict the other half.

    python benchmarks/calibrate_generalisation.py [--rows 12] [--evals 12] [--waves 3] [--workers 2]

For each of three (GPU, backend, model, TP) groups of ../shared/calibration/silicon_calibration.csv
(aggregated rows, TTFT under 20 s, concurrency at most 128), a spread of `--rows` rows
(fit_roofline.sample) is split alternately into a training and a held-out half. Each row becomes
a minimal `vllm bench serve` result file: 10 × concurrency prompts at --max-concurrency
concurrency, request rate inf, the recipe's lengths (uniform in [0.8 L, L], recorded as vLLM's
`--metadata random_input_len=0.9L random_output_len=0.9L random_range_ratio=1/9` would), and its
TTFT and TPOT as the means, as benchmarks/accuracy.py reads them.

Both fits start from the built-in RooflineProfile defaults (the shipped profile was fitted on
every row, held-out ones included) and get the same number of evaluations:

- calibrate: servesim/calibrate/fit.py on the training files, against one deployment: the
  launch flags of the group's largest-concurrency training row (calibration_rows.row_config), its
  length, batch and concurrency limits raised to the largest of the group's rows, fitting what the
  files constrain;
- fit_roofline: benchmarks/fit_roofline.py's fit_group on the same training rows (each row its
  own launch flags), all eight parameters.

Both profiles are then scored on the held-out files the same way, by calibrate's evaluator
(rebuilt from the minimal files, 3 waves extrapolated): median absolute percentage error of mean
TTFT and mean TPOT. Prints a Markdown table; run once, it takes a few minutes on two cores.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import fields, replace
from multiprocessing import Pool
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from calibration_rows import load_rows, row_config  # noqa: E402
from fit_roofline import fit_group, sample  # noqa: E402

from servesim.calibrate.constraints import free_parameters  # noqa: E402
from servesim.calibrate.fit import Evaluator, fit, prepare  # noqa: E402
from servesim.calibrate.search import PARAMS  # noqa: E402
from servesim.config import load_config  # noqa: E402
from servesim.timing.roofline import RooflineProfile  # noqa: E402
from servesim.validate.readers import read_results  # noqa: E402

GROUPS = (("h100-sxm", "trtllm", "llama-3.1-8b", 1), ("h200-sxm", "vllm", "minimax-m2.5", 4),
          ("b200", "sglang", "qwen3.5-397b-a17b", 4))
MAX_CONCURRENCY = 128


def minimal_result(row) -> dict:
    """A `vllm bench serve --save-result` file holding only what a calibration row gives."""
    prompts = 10 * row.concurrency
    return {"date": "20260101-000000", "endpoint_type": "openai", "backend": "openai", "model_id": row.model,
            "num_prompts": prompts, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": row.concurrency,
            "completed": prompts, "failed": 0, "total_input_tokens": round(0.9 * row.isl * prompts),
            "total_output_tokens": round(0.9 * row.osl * prompts), "mean_ttft_ms": row.ttft_ms,
            "mean_tpot_ms": row.tpot_ms,
            # The recipe's lengths, uniform in [0.8 L, L], as `--metadata` records vLLM's random dataset:
            # [floor(0.9 L (1 - 1/9)), ceil(0.9 L (1 + 1/9))] = [0.8 L, L].
            "random_input_len": str(round(0.9 * row.isl)), "random_output_len": str(round(0.9 * row.osl)),
            "random_range_ratio": str(1 / 9)}


def _ape(predicted, measured: float) -> float:
    return float("nan") if predicted is None else abs(predicted - measured) / measured * 100


def held_out_errors(runs, params: dict, evaluator: Evaluator) -> tuple[float, float]:
    ttft, tpot = [], []
    for run in runs:
        predicted = evaluator.predict(run, params)
        ttft.append(_ape(None if predicted is None else predicted[0], run.ttft_ms))
        tpot.append(_ape(None if predicted is None else predicted[1], run.tpot_ms))
    return float(np.nanmedian(ttft)), float(np.nanmedian(tpot))


def run_group(key, rows, args, pool, folder: Path) -> dict:
    gpu, backend, model, tp = key
    chosen = sample([r for r in rows if r.concurrency <= MAX_CONCURRENCY], args.rows)
    train, test = chosen[0::2], chosen[1::2]
    defaults = {f.name: float(getattr(RooflineProfile(), f.name)) for f in fields(RooflineProfile)}
    # One deployment serves every file: the largest-concurrency training row's launch flags, with its
    # length and batch limits raised to the group's largest (else longer held-out prompts are refused).
    widest = max(train, key=lambda r: r.concurrency)
    config = row_config(replace(widest, isl=max(r.isl for r in chosen), osl=max(r.osl for r in chosen),
                                concurrency=max(r.concurrency for r in chosen),
                                batch_size=max(r.batch_size for r in chosen)))
    config["engine"]["timing"].update({p: defaults[p] for p in PARAMS if defaults[p] > 0})
    config_path = folder / "deployment.yaml"
    config_path.write_text(yaml.safe_dump(config))
    runs = {}
    for name, part in (("train", train), ("test", test)):
        runs[name] = []
        for i, row in enumerate(part):
            path = folder / f"{name}{i}.json"
            path.write_text(json.dumps(minimal_result(row)))
            runs[name] += read_results(path)
    resolved = load_config(config_path).config
    free, _ = free_parameters(runs["train"], resolved, None)
    t0 = time.perf_counter()
    evaluator = Evaluator(config_path)
    train_runs = prepare(runs["train"], folder / "scratch", args.waves)
    test_runs = prepare(runs["test"], folder / "scratch_test", args.waves)
    calibrated = fit(train_runs, defaults, free, args.evals, evaluator).params
    t1 = time.perf_counter()
    refit, _, _ = fit_group(f"{gpu}/{backend}", train, pool, args.evals)
    t2 = time.perf_counter()
    return {"group": f"{gpu}/{backend} {model} tp{tp}", "rows": f"{len(train)}+{len(test)}",
            "free": free, "defaults": held_out_errors(test_runs, defaults, evaluator),
            "calibrate": held_out_errors(test_runs, calibrated, evaluator),
            "fit_roofline": held_out_errors(test_runs, {**defaults, **refit}, evaluator),
            "seconds": (round(t1 - t0), round(t2 - t1))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=12)
    parser.add_argument("--evals", type=int, default=12)
    parser.add_argument("--waves", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    rows, _ = load_rows()
    by_key = defaultdict(list)
    for row in rows:
        if row.mode == "agg" and row.ttft_ms < 20_000 and row.attention_dp == 1:
            by_key[(row.gpu, row.backend, row.model, row.tp)].append(row)
    print("| group | rows (fit+held out) | calibrate fits | held-out median APE TTFT / TPOT: built-in "
          "defaults | calibrate | fit_roofline refit | seconds (calibrate, fit_roofline) |")
    print("|---|---|---|---|---|---|---|")
    with Pool(args.workers) as pool, tempfile.TemporaryDirectory() as tmp:
        for index, key in enumerate(GROUPS):
            folder = Path(tmp) / str(index)
            folder.mkdir()
            out = run_group(key, by_key[key], args, pool, folder)
            cells = [f"{out[k][0]:.1f}% / {out[k][1]:.1f}%" for k in ("defaults", "calibrate", "fit_roofline")]
            print(f"| {out['group']} | {out['rows']} | {', '.join(out['free'])} | " + " | ".join(cells)
                  + f" | {out['seconds'][0]}, {out['seconds'][1]} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
