"""The roofline fit's machinery, shared by benchmarks/fit_roofline.py and `servesim calibrate`.

The loss is the mean over runs of the squared log error of mean TPOT plus half that of mean
TTFT, each capped at 1 so one odd run cannot dominate; the search is Nelder-Mead in log space,
a point outside the physical bounds scoring 10 plus its distance outside them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

PARAMS = ("gemm_efficiency", "memory_efficiency", "attention_efficiency", "pass_overhead_ms",
          "per_layer_overhead_us", "comm_latency_us", "expert_efficiency", "eager_moe_layer_us")
# Physical ranges: a fit may not buy accuracy with an impossible efficiency.
BOUNDS = {"gemm_efficiency": (0.25, 0.95), "memory_efficiency": (0.5, 0.95), "attention_efficiency": (0.25, 0.9),
          "pass_overhead_ms": (0.1, 15.0), "per_layer_overhead_us": (0.5, 60.0), "comm_latency_us": (2.0, 60.0),
          # Fused-MoE grouped GEMMs against dense ones at equal rows per expert: published
          # kernels reach a third to all of the dense throughput at prefill sizes.
          "expert_efficiency": (0.15, 1.0),
          # Eager PyTorch issues a MoE layer's 50-150 kernels one by one from Python (5-20 µs
          # each); a floor of 1 µs keeps the search in log space.
          "eager_moe_layer_us": (1.0, 3000.0)}
# Where a search starts for a parameter the built-in profile leaves off (0).
START = {"eager_moe_layer_us": 300.0}
FAILED_RUN_LOSS = 4.0   # a run the simulator refuses at these parameters


def run_loss(measured_ttft_ms: float, measured_tpot_ms: float, predicted: tuple[float, float] | None) -> float:
    """One run's term: capped squared log errors, TPOT weighted 1 and TTFT 1/2."""
    if predicted is None:
        return FAILED_RUN_LOSS
    ttft, tpot = predicted
    e_tpot = math.log(max(tpot, 1e-6) / measured_tpot_ms)
    e_ttft = math.log(max(ttft, 1e-6) / measured_ttft_ms)
    return min(e_tpot * e_tpot, 1.0) + 0.5 * min(e_ttft * e_ttft, 1.0)


def to_params(x: np.ndarray, names: tuple[str, ...] = PARAMS) -> dict:
    out = {}
    for name, value in zip(names, x):
        lo, hi = BOUNDS[name]
        out[name] = float(min(max(math.exp(value), lo), hi))
    return out


def out_of_bounds(x: np.ndarray, names: tuple[str, ...] = PARAMS) -> float:
    """How far (in log units) a point lies outside the bounds: a penalty keeps the search inside."""
    total = 0.0
    for name, value in zip(names, x):
        lo, hi = BOUNDS[name]
        total += max(0.0, math.log(lo) - value) + max(0.0, value - math.log(hi))
    return total


def start_values(profile: dict, names: tuple[str, ...] = PARAMS) -> dict:
    """A profile's values as a search's start: a parameter off (0) starts at START, all inside BOUNDS."""
    begin = {p: START.get(p, v) if v <= 0 else v for p, v in ((p, profile[p]) for p in names)}
    return {p: min(max(v, BOUNDS[p][0]), BOUNDS[p][1]) for p, v in begin.items()}


def nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, evals: int,
                step: float = 0.35) -> tuple[np.ndarray, float]:
    n = len(x0)
    simplex = [x0] + [x0 + step * np.eye(n)[i] for i in range(n)]
    values = [f(x) for x in simplex]
    used = n + 1
    while used < evals:
        order = np.argsort(values)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        centroid = np.mean(simplex[:-1], axis=0)
        worst = simplex[-1]
        reflected = centroid + (centroid - worst)
        fr = f(reflected)
        used += 1
        if fr < values[0]:
            expanded = centroid + 2 * (centroid - worst)
            fe = f(expanded)
            used += 1
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centroid + 0.5 * (worst - centroid)
            fc = f(contracted)
            used += 1
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                best = simplex[0]
                simplex = [best] + [best + 0.5 * (x - best) for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
                used += n
    best = int(np.argmin(values))
    return simplex[best], values[best]
