"""Routing a request to one worker of a pool.

A router sees what a real one can at that moment: which workers it sent what
and what has come back (its own bookkeeping), the load metrics workers publish
(KV blocks in use), and, for `kv_aware`, the blocks each worker's prefix cache
holds as its cache events have announced them. It never looks ahead.

- `round_robin`: workers in turn.
- `random`: uniformly, from a seeded stream.
- `least_outstanding`: fewest tokens in flight (prompt + requested output of the
  requests sent and not yet finished); ties go to the lowest index.
- `kv_aware` (after NVIDIA Dynamo's KV router, cluster/kv_router.py): the lowest
  `overlap_score_weight × prefill blocks + decode blocks`, both from the router's own
  bookkeeping of what it sent and the prefix the worker's cache events announce.
- `llm_d` (after llm-d's endpoint picker, cluster/llm_d_router.py): the highest weighted
  sum of prefix-cache, queue, KV-utilisation and load scores.
"""

from __future__ import annotations

from servesim.cluster.kv_router import KvAwareSelector, OverlapCredit
from servesim.cluster.llm_d_router import LlmDPicker
from servesim.config.run_spec import RouterSpec
from servesim.seeds import rng_for


class Router:
    def __init__(self, cfg: RouterSpec, workers: list, purpose: str = "router", factory=None) -> None:
        self.policy = cfg.policy
        self.overlap_weight = cfg.overlap_weight
        self.workers = workers
        self._next = 0
        self._seed = cfg.seed
        self._purpose = purpose
        self._rng = None   # made on the first random choice: numpy.random costs start-up time
        self.outstanding = [0] * len(workers)
        # Which workers may be sent requests (autoscaling: ready replicas only); None: all.
        self.ready: list[bool] | None = None
        self.selector = None
        if cfg.policy == "kv_aware":
            delay = cfg.kv_events_delay_ns if cfg.kv_events == "pass_end" else None
            ttl = cfg.router_ttl_ns if cfg.kv_events == "none" else None
            credit = None
            if cfg.dynamo_version == "1.2":
                credit = OverlapCredit(cfg.overlap_score_credit, cfg.prefill_load_scale, cfg.overlap_score_credit_decay)
            self.selector = KvAwareSelector(workers, cfg.overlap_weight, cfg.temperature, self._make_rng, delay,
                                            credit, ttl)
        elif cfg.policy == "llm_d":
            self.selector = LlmDPicker(cfg.llm_d, workers, factory, self._make_rng)

    @property
    def hears_kv_events(self) -> bool:
        """Its index of the workers' caches is fed by their KV events at pass ends."""
        return self.policy == "kv_aware" and self.selector.events_delay_ns is not None \
            and self.selector.predicted_ttl_ns is None

    def _make_rng(self):
        return rng_for(self._seed, self._purpose)

    def choose(self, input_length: int, output_length: int, keys_for=None, trace_request=None,
               now: int = 0) -> int:
        """Index of the worker for a request; `keys_for(worker)` gives its prompt's block keys
        there. `now`: the routing instant (what the router's bookkeeping has heard by then)."""
        if self.ready is not None:   # a pool that grows tracks every request from the start
            return self._choose_ready(input_length, keys_for, trace_request, now)
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
        if self.policy == "kv_aware":
            return self.selector.choose(input_length, keys_for, now)
        return self.selector.choose(trace_request, now)

    def _choose_ready(self, input_length: int, keys_for, trace_request, now: int) -> int:
        """`choose` over the workers `ready` marks: each policy as above, over those alone."""
        ready = self.ready
        candidates = [i for i, up in enumerate(ready) if up]
        if self.policy == "round_robin":
            while not ready[self._next]:
                self._next = (self._next + 1) % len(ready)
            index = self._next
            self._next = (index + 1) % len(ready)
            return index
        if self.policy == "random":
            if self._rng is None:
                self._rng = rng_for(self._seed, self._purpose)
            return candidates[int(self._rng.integers(len(candidates)))]
        if self.policy == "least_outstanding":
            return min(candidates, key=lambda i: (self.outstanding[i], i))
        if self.policy == "kv_aware":
            return self.selector.choose(input_length, keys_for, now, candidates)
        return self.selector.choose(trace_request, now, candidates)

    def add_worker(self) -> None:
        """A worker appended to the pool (`workers` is the role's own list), not ready yet."""
        self.outstanding.append(0)
        self.ready.append(False)
        if self.selector is not None:
            self.selector.add_worker()

    def sent(self, index: int, tokens: int, request=None) -> None:
        self.outstanding[index] += tokens
        tracked = len(self.workers) > 1 or self.ready is not None
        if self.policy == "kv_aware" and tracked:
            self.selector.sent(index, request)
        elif self.policy == "llm_d" and tracked:
            self.selector.sent(index)

    def returned(self, index: int, tokens: int, request=None) -> None:
        self.outstanding[index] -= tokens
        if self.policy == "kv_aware" and (len(self.workers) > 1 or self.ready is not None):
            self.selector.returned(index, request)
