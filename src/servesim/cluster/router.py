"""Routing a request to one worker of a pool.

A router sees what a real one can at that moment: which workers it sent what
and what has come back (its own bookkeeping), the load metrics workers publish
(KV blocks in use), and, for `kv_aware`, the blocks each worker's prefix cache
holds as its cache events have announced them. It never looks ahead.

- `round_robin`: workers in turn.
- `random`: uniformly, from a seeded stream.
- `least_outstanding`: fewest tokens in flight (prompt + requested output of the
  requests sent and not yet finished); ties go to the lowest index.
- `kv_aware` (after NVIDIA Dynamo's KV router): the worker with the lowest cost
  `overlap_weight × prefill blocks to compute + decode blocks in use`, where the
  blocks to compute are the request's prompt blocks minus the longest prefix that
  worker already caches; ties go to the lowest index.
"""

from __future__ import annotations

from servesim.config.run_spec import RouterSpec
from servesim.seeds import rng_for


class Router:
    def __init__(self, cfg: RouterSpec, workers: list, purpose: str = "router") -> None:
        self.policy = cfg.policy
        self.overlap_weight = cfg.overlap_weight
        self.workers = workers
        self._next = 0
        self._seed = cfg.seed
        self._purpose = purpose
        self._rng = None   # made on the first random choice: numpy.random costs start-up time
        self.outstanding = [0] * len(workers)

    def choose(self, input_length: int, output_length: int, keys_for=None) -> int:
        """Index of the worker for a request; `keys_for(worker)` gives its prompt's block keys there."""
        n = len(self.workers)
        if n == 1:
            return 0
        if self.policy == "round_robin":
            index = self._next
            self._next = (index + 1) % n
            return index
        if self.policy == "random":
            if self._rng is None:
                self._rng = rng_for(self._seed, self._purpose)
            return int(self._rng.integers(n))
        if self.policy == "least_outstanding":
            return min(range(n), key=lambda i: (self.outstanding[i], i))
        return self._kv_aware(input_length, keys_for)

    def _kv_aware(self, input_length: int, keys_for) -> int:
        best, best_cost = 0, None
        for i, worker in enumerate(self.workers):
            kv = worker.scheduler.kv
            prompt_blocks = -(-input_length // kv.block_size)
            overlap = kv.cached_prefix_blocks(keys_for(worker)) if keys_for is not None else 0
            cost = self.overlap_weight * (prompt_blocks - overlap) + kv.num_used
            if best_cost is None or cost < best_cost:
                best, best_cost = i, cost
        return best

    def sent(self, index: int, tokens: int) -> None:
        self.outstanding[index] += tokens

    def returned(self, index: int, tokens: int) -> None:
        self.outstanding[index] -= tokens
