"""Synthetic workloads: fixed, uniform or resampled lengths, generated lazily.

Requests are drawn in blocks of `BLOCK` so a million-request workload never
sits in memory: for each block, input lengths are drawn before output lengths
(or, with `lengths_from`, one index per request into the source trace), all
from one stream seeded by the workload seed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from servesim.config import LengthRange, SyntheticConfig
from servesim.seeds import rng_for
from servesim.workload.trace import TraceRequest, load_trace

BLOCK = 65536


def _draw(length: int | LengthRange, count: int, rng: np.random.Generator | None) -> np.ndarray:
    if isinstance(length, int):
        return np.full(count, length, dtype=np.int64)
    return rng.integers(length.min, length.max, size=count, endpoint=True, dtype=np.int64)


def generate(cfg: SyntheticConfig, root_seed: int, lengths_path: Path | None = None) -> Iterator[TraceRequest]:
    fixed = lengths_path is None and isinstance(cfg.input_length, int) and isinstance(cfg.output_length, int)
    # Fixed lengths draw nothing, and numpy.random costs start-up time.
    rng = None if fixed else rng_for(root_seed if cfg.seed is None else cfg.seed, "synthetic")
    source_in = source_out = None
    if lengths_path is not None:
        source, _ = load_trace(lengths_path, cfg.lengths_format)
        source_in = np.array([r.input_length for r in source], dtype=np.int64)
        source_out = np.array([r.output_length for r in source], dtype=np.int64)
    done = 0
    while done < cfg.num_requests:
        count = min(BLOCK, cfg.num_requests - done)
        if source_in is not None:
            pick = rng.integers(0, len(source_in), size=count)
            inputs, outputs = source_in[pick], source_out[pick]
        else:
            inputs = _draw(cfg.input_length, count, rng)
            outputs = _draw(cfg.output_length, count, rng)
        for i, (inp, out) in enumerate(zip(inputs.tolist(), outputs.tolist())):
            yield TraceRequest(request_id=done + i, arrival_ns=None, input_length=inp, output_length=out)
        done += count
