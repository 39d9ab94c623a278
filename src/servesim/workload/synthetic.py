"""Synthetic workloads: fixed, uniform or resampled lengths, generated lazily.

Requests are drawn in blocks of `BLOCK` so a million-request workload never
sits in memory: for each block, input lengths are drawn before output lengths
(or, with `lengths_from`, one index per request into the source trace or ShareGPT
file's kept conversations, workload/sharegpt.py), all
from one stream seeded by the workload seed.

A `prefix_length` P puts the same P tokens before every prompt's own `input_length`
tokens (vLLM's RandomDataset with --random-prefix-len). The prefix is one prompt-content
block of P tokens (workload/prompt.py) held by every request: `content_block_size` makes
the run's content block P tokens long, so engine block j is shared exactly when it ends
within the prefix, (j + 1)·block_size ≤ P, as vLLM's chained block hashes are.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from servesim.config import LengthRange, SyntheticConfig, WorkloadConfig
from servesim.seeds import rng_for
from servesim.workload.trace import TraceRequest, load_trace

BLOCK = 65536
PREFIX_HASH_IDS = (0,)


def content_block_size(workload: WorkloadConfig) -> int:
    """Tokens one hash_id stands for: the trace's `trace_block_size`, or a synthetic prefix's length."""
    synthetic = workload.synthetic
    if synthetic is not None and synthetic.prefix_length:
        return synthetic.prefix_length
    if synthetic is not None and synthetic.prefix_repetition is not None:
        return synthetic.prefix_repetition.prefix_length
    if workload.sessions is not None and workload.sessions.system_prompt_length:
        return workload.sessions.system_prompt_length
    return workload.trace_block_size


def synthetic_count(workload: WorkloadConfig) -> int | None:
    """How many requests a synthetic workload sends (None for a trace, whose list says)."""
    if workload.synthetic is None:
        return None
    count = workload.synthetic.num_requests
    if workload.synthetic.prefix_repetition is not None:   # whole prompts per prefix, as vLLM makes them
        from servesim.workload.prefix_repetition import repetition_count

        count = repetition_count(workload.synthetic)
    return min(count, workload.max_requests or count)


def _draw(length: int | LengthRange, count: int, rng: np.random.Generator | None) -> np.ndarray:
    if isinstance(length, int):
        return np.full(count, length, dtype=np.int64)
    return rng.integers(length.min, length.max, size=count, endpoint=True, dtype=np.int64)


def _source_lengths(cfg: SyntheticConfig, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The (input, output) pairs lengths_from draws from: a ShareGPT file's or a trace's."""
    from servesim.workload.sharegpt import is_sharegpt, sharegpt_lengths

    if is_sharegpt(path, cfg.lengths_format):
        tokenizer = None if cfg.lengths_tokenizer is None else Path(cfg.lengths_tokenizer)
        return sharegpt_lengths(path, tokenizer)
    source, _ = load_trace(path, cfg.lengths_format)
    return (np.array([r.input_length for r in source], dtype=np.int64),
            np.array([r.output_length for r in source], dtype=np.int64))


def generate(cfg: SyntheticConfig, root_seed: int, lengths_path: Path | None = None) -> Iterator[TraceRequest]:
    if cfg.prefix_repetition is not None:
        from servesim.workload.prefix_repetition import generate_repetition

        yield from generate_repetition(cfg, root_seed if cfg.seed is None else cfg.seed)
        return
    fixed = lengths_path is None and isinstance(cfg.input_length, int) and isinstance(cfg.output_length, int)
    # Fixed lengths draw nothing, and numpy.random costs start-up time.
    rng = None if fixed else rng_for(root_seed if cfg.seed is None else cfg.seed, "synthetic")
    source_in = source_out = None
    if lengths_path is not None:
        source_in, source_out = _source_lengths(cfg, lengths_path)
    done = 0
    while done < cfg.num_requests:
        count = min(BLOCK, cfg.num_requests - done)
        if source_in is not None:
            pick = rng.integers(0, len(source_in), size=count)
            inputs, outputs = source_in[pick], source_out[pick]
        else:
            inputs = _draw(cfg.input_length, count, rng)
            outputs = _draw(cfg.output_length, count, rng)
        prefix = cfg.prefix_length
        hash_ids = PREFIX_HASH_IDS if prefix else None
        for i, (inp, out) in enumerate(zip(inputs.tolist(), outputs.tolist())):
            yield TraceRequest(request_id=done + i, arrival_ns=None, input_length=prefix + inp,
                               output_length=out, hash_ids=hash_ids)
        done += count
