"""Synthetic workloads: fixed or uniformly drawn lengths, no arrival times of their own."""

from __future__ import annotations

import numpy as np

from servesim.config import LengthRange, SyntheticConfig
from servesim.seeds import rng_for
from servesim.workload.trace import TraceRequest


def _draw(length: int | LengthRange, count: int, rng: np.random.Generator) -> np.ndarray:
    if isinstance(length, int):
        return np.full(count, length, dtype=np.int64)
    return rng.integers(length.min, length.max, size=count, endpoint=True, dtype=np.int64)


def generate(cfg: SyntheticConfig, root_seed: int) -> list[TraceRequest]:
    """Requests 0..n-1; input lengths are drawn before output lengths, from one seeded stream."""
    rng = rng_for(root_seed if cfg.seed is None else cfg.seed, "synthetic")
    inputs = _draw(cfg.input_length, cfg.num_requests, rng)
    outputs = _draw(cfg.output_length, cfg.num_requests, rng)
    return [
        TraceRequest(request_id=i, arrival_ns=None, input_length=int(inputs[i]), output_length=int(outputs[i]))
        for i in range(cfg.num_requests)
    ]
