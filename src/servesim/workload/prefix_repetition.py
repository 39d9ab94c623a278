"""`synthetic.prefix_repetition`: vLLM 0.32's prefix_repetition dataset, lengths and prefix structure.

vLLM (benchmarks/datasets/datasets.py, PrefixRepetitionRandomDataset.sample) makes
num_prefixes random prefixes of prefix_len tokens; for each, num_requests // num_prefixes
prompts of that prefix followed by a random suffix of suffix_len tokens, all asking
output_len tokens; then shuffles the prompts. So a run has num_prefixes × (num_requests //
num_prefixes) requests, each prompt prefix_length + suffix_length tokens.

Here prefix p is one prompt-content block of prefix_length tokens (hash id p; the run's
content block is prefix_length long, workload/synthetic.py `content_block_size`), and the
suffix is the request's own: engine block j is shared by the prompts of one prefix exactly
when it ends within the prefix. The order is a seeded permutation ("synthetic.shuffle"
stream), not vLLM's draws; output lengths are drawn as `synthetic.output_length` says.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from servesim.config import SyntheticConfig
from servesim.seeds import rng_for
from servesim.workload.trace import TraceRequest

BLOCK = 65536


def repetition_count(cfg: SyntheticConfig) -> int:
    repetition = cfg.prefix_repetition
    return repetition.num_prefixes * (cfg.num_requests // repetition.num_prefixes)


def generate_repetition(cfg: SyntheticConfig, seed: int) -> Iterator[TraceRequest]:
    repetition = cfg.prefix_repetition
    per_prefix = cfg.num_requests // repetition.num_prefixes
    total = repetition_count(cfg)
    order = rng_for(seed, "synthetic.shuffle").permutation(total).astype(np.int64) // per_prefix
    output = cfg.output_length
    rng = None if isinstance(output, int) else rng_for(seed, "synthetic")
    prompt = repetition.prefix_length + repetition.suffix_length
    keys = [(p,) for p in range(repetition.num_prefixes)]
    for begin in range(0, total, BLOCK):
        prefixes = order[begin:begin + BLOCK].tolist()
        if rng is None:
            outputs = [output] * len(prefixes)
        else:
            outputs = rng.integers(output.min, output.max, size=len(prefixes), endpoint=True).tolist()
        for i, (prefix, out) in enumerate(zip(prefixes, outputs)):
            yield TraceRequest(request_id=begin + i, arrival_ns=None, input_length=prompt, output_length=out,
                               hash_ids=keys[prefix])
