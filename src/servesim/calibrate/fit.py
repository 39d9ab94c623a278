"""Fit a roofline profile to result files, and its leave-one-out errors (docs/validate.md, "calibrate").

Each evaluation simulates every file's rebuilt run (validate/rebuild.py) at trial parameters
and scores its mean TTFT and TPOT with search.run_loss. To bound the cost, a closed-loop run
is simulated for `waves` waves of its concurrency (requests beyond are dropped) and its means
extrapolated to the file's number of waves: the first (cold) wave weighted 1/W and the later
ones (W − 1)/W, as benchmarks/fit_roofline.py does for the calibration rows; an open-loop run
keeps its first `waves` × 16 requests. Everything is sequential and seeded: the same files and
config give the same profile.
"""

from __future__ import annotations

import math
import tempfile
import warnings
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable

import numpy as np

from servesim.calibrate.search import nelder_mead, out_of_bounds, run_loss, start_values, to_params
from servesim.errors import ServesimError
from servesim.validate.measured import MeasuredRun
from servesim.validate.rebuild import workload_for

OPEN_LOOP_REQUESTS_PER_WAVE = 16


@dataclass
class FitRun:
    """One measured run as the fit simulates it."""

    measured: MeasuredRun
    workload: dict[str, Any]
    concurrency: int | None          # closed loop: the wave size
    waves_total: float               # the file's waves (num_requests / concurrency)
    limit: int                       # requests simulated

    @property
    def ttft_ms(self) -> float:
        return self.measured.figure("ttft", "mean")

    @property
    def tpot_ms(self) -> float:
        return self.measured.figure("tpot", "mean")


def prepare(runs: list[MeasuredRun], scratch: Path, waves: int) -> list[FitRun]:
    out = []
    for index, run in enumerate(runs):
        workload = workload_for(run, scratch / f"run{index}")
        client = workload["client"]
        closed = client.get("request_rate") == "inf" and client.get("max_concurrency") is not None \
            and "ramp_up_strategy" not in client
        concurrency = client.get("max_concurrency") if closed else None
        if concurrency:
            limit = min(run.num_requests, waves * concurrency)
            total = run.num_requests / concurrency
        else:
            limit = min(run.num_requests, waves * OPEN_LOOP_REQUESTS_PER_WAVE)
            total = 1.0
        out.append(FitRun(run, workload, concurrency, total, max(limit, 1)))
    return out


def _means(fit_run: FitRun, result) -> tuple[float, float]:
    """Mean TTFT and TPOT (ms) of the file's whole run, from the simulated waves."""
    table = result.requests
    ids = table.column("request_id")
    first_token = table.column("first_token_ns")
    served = table.column("status") != 2
    if not served.any():
        return math.nan, math.nan
    ttft = ((first_token - table.column("arrival_ns")) / 1e6)[served]
    out_len = table.column("output_length")[served]
    tpot = np.where(out_len > 1, (table.column("finish_ns")[served] - first_token[served])
                    / np.maximum(out_len - 1, 1) / 1e6, np.nan)
    ids = ids[served]
    if fit_run.concurrency is None or fit_run.waves_total <= 1 or not (ids >= fit_run.concurrency).any():
        return float(ttft.mean()), float(np.nanmean(tpot))
    first, later = ids < fit_run.concurrency, ids >= fit_run.concurrency
    weight = 1 / fit_run.waves_total

    def blend(values):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            a, b = np.nanmean(values[first]), np.nanmean(values[later])
        return float(a if math.isnan(b) else b if math.isnan(a) else a * weight + b * (1 - weight))
    return blend(ttft), blend(tpot)


def simulate_run(fit_run: FitRun, config: Path, params: dict[str, float]) -> tuple[float, float] | None:
    """(mean TTFT, mean TPOT) in ms at these timing parameters, or None where the simulator refuses."""
    from servesim.run import simulate

    overrides = [("workload", fit_run.workload), ("workload.warmup_requests", 0),
                 ("workload.max_requests", fit_run.limit)]
    overrides += [(f"engine.timing.{name}", value) for name, value in params.items()]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            means = _means(fit_run, simulate(config, overrides=overrides))
    except ServesimError:
        return None
    # Every request refused (longer than the deployment's limit, say): a failed run, not a NaN loss.
    return means if all(math.isfinite(m) for m in means) else None


@dataclass
class Fit:
    params: dict[str, float]
    loss_start: float
    loss_fitted: float


class Evaluator:
    """Counts and caches simulations; `tick` reports each one (the progress bar)."""

    def __init__(self, config: Path, tick: Callable[[], None] | None = None) -> None:
        self.config = config
        self.tick = tick or (lambda: None)
        self.simulations = 0
        self._cache: dict[tuple, tuple[float, float] | None] = {}

    def predict(self, fit_run: FitRun, params: dict[str, float]) -> tuple[float, float] | None:
        key = (id(fit_run), tuple(sorted((k, round(v, 9)) for k, v in params.items())))
        if key not in self._cache:
            self._cache[key] = simulate_run(fit_run, self.config, params)
            self.simulations += 1
            self.tick()
        return self._cache[key]

    def loss(self, runs: list[FitRun], params: dict[str, float]) -> float:
        return sum(run_loss(r.ttft_ms, r.tpot_ms, self.predict(r, params)) for r in runs) / len(runs)


def fit(runs: list[FitRun], base: dict[str, float], free: list[str], evals: int, evaluator: Evaluator) -> Fit:
    """Nelder-Mead over `free` (log space, inside the bounds) from `base`; the others stay at base."""
    begin = start_values(base, tuple(free))
    x0 = np.log([begin[p] for p in free])
    names = tuple(free)

    def objective(x: np.ndarray) -> float:
        penalty = out_of_bounds(x, names)
        if penalty:
            return 10.0 + penalty
        return evaluator.loss(runs, {**base, **to_params(x, names)})

    start_loss = evaluator.loss(runs, base)
    best, best_loss = nelder_mead(objective, x0, evals)
    fitted = {**base, **to_params(best, names)}
    if best_loss >= start_loss:   # the search never beat the start: keep the shipped values
        fitted, best_loss = dict(base), start_loss
    return Fit(fitted, start_loss, best_loss)


def signed_pct(predicted: float | None, measured: float) -> float | None:
    return None if predicted is None else (predicted - measured) / measured * 100.0


def base_parameters(config: Path) -> tuple[dict[str, float], str, Any]:
    """The config's own roofline profile (its fit, pins applied) as the start, its key, its resolved config."""
    from servesim.config import load_config
    from servesim.config.resolution import resolve
    from servesim.engine.registry import get_backend
    from servesim.timing.roofline import RooflineProfile, fitted_profile, named_profile, profile_with_overrides

    run = resolve(load_config(config))
    cfg = run.config
    timing = cfg.engine.timing
    if timing.kind != "roofline":
        raise ServesimError(f"--config {config}: calibrate fits the roofline step-time model; its "
                            f"engine.timing.kind is {timing.kind}")
    backend = get_backend(cfg.engine.backend)
    if timing.profile_file is not None:
        from servesim.calibrate.profile_file import load_profile_file

        profile, key = load_profile_file(timing.profile_file, run.gpu.name, backend.timing_profile), \
            f"profile_file {timing.profile_file}"
    elif timing.profile is not None:
        profile, key = named_profile(timing.profile), timing.profile
    else:
        profile, key = fitted_profile(run.gpu.name, backend.timing_profile)
    profile = profile_with_overrides(profile, timing)
    values = {f.name: float(getattr(profile, f.name)) for f in fields(RooflineProfile)}
    return values, key, cfg


def scratch_dir() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="servesim-calibrate-")
