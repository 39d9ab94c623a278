"""`llm_d`: llm-d's endpoint picker, its weighted scorers and max-score picker
(docs/modeling/routing.md names the version followed).

Each worker's score is the weighted sum of
- prefix-cache-scorer: the leading blocks of the prompt (`block_size` tokens each, at most
  `max_prefix_blocks_to_match`) the picker remembers sending that worker, over the prompt's
  blocks. The memory is the picker's own: after each pick it records the prompt's blocks for
  the chosen worker, in a per-worker LRU of `lru_capacity_per_server` blocks;
- queue-scorer: (most waiting − its waiting) / (most − fewest), 1 for all when equal;
- kv-cache-utilization-scorer: 1 − its KV cache usage;
- load-aware-scorer: 0.5 with nothing waiting, else 0.5 × (1 − waiting / threshold), ≥ 0,
and the highest score wins, ties drawn from the router's seeded stream. Waiting requests and
KV usage are the metrics a worker publishes, as last scraped (every `metrics_interval_ms`).
"""

from __future__ import annotations

from collections import OrderedDict

from servesim.workload.prompt import BlockKeys


class LlmDPicker:
    def __init__(self, cfg, workers: list, factory, rng_source) -> None:
        self.cfg = cfg
        self.workers = workers
        self.factory = factory            # the role's RequestFactory: the prompt interner
        self.lru = [OrderedDict() for _ in workers]
        self._interval_ns = round(cfg.metrics_interval_ms * 1e6)
        self._scraped: list[tuple[int, float]] | None = None
        self._next_scrape = 0
        self._rng_source = rng_source
        self._rng = None
        self._chosen: list[int] = []

    # ------------------------------------------------------------------ inputs

    def prompt_hashes(self, trace_request) -> list[int]:
        size = self.cfg.block_size
        full = min(trace_request.input_length // size, self.cfg.max_prefix_blocks_to_match)
        factory = self.factory
        keys = BlockKeys(trace_request.request_id, trace_request.input_length, trace_request.hash_ids, size,
                         factory.trace_block_size, factory.interner)
        shared = min(full, keys.shared_blocks)
        return keys.shared_keys(0, shared) + [keys.key(i) for i in range(shared, full)]

    def metrics(self, now: int) -> list[tuple[int, float]]:
        """(waiting requests, KV cache usage) per worker, as of the last scrape."""
        if self._scraped is None or self._interval_ns == 0 or now >= self._next_scrape:
            self._scraped = [scrape(worker) for worker in self.workers]
            if self._interval_ns:
                self._next_scrape = now - now % self._interval_ns + self._interval_ns
        return self._scraped

    # ------------------------------------------------------------------ scoring

    def scores(self, hashes: list[int], now: int, candidates: list[int] | None = None) -> list[float]:
        """Each pod's weighted score; over `candidates` alone, in their order, when given (the
        scorers normalise over the pods the picker chooses from)."""
        cfg = self.cfg
        metrics, lru = self.metrics(now), self.lru
        if candidates is not None:
            metrics, lru = [metrics[i] for i in candidates], [lru[i] for i in candidates]
        waiting = [q for q, _ in metrics]
        most, fewest = max(waiting), min(waiting)
        totals = []
        for pod_lru, (queue, usage) in zip(lru, metrics):
            prefix = matched_blocks(pod_lru, hashes) / len(hashes) if hashes else 0.0
            queue_score = 1.0 if most == fewest else (most - queue) / (most - fewest)
            totals.append(cfg.prefix_cache_weight * prefix + cfg.queue_weight * queue_score
                          + cfg.kv_cache_utilization_weight * (1.0 - usage)
                          + cfg.load_aware_weight * load_aware(queue, cfg.load_aware_threshold))
        return totals

    def choose(self, trace_request, now: int, candidates: list[int] | None = None) -> int:
        """The pod for the request; `candidates`: the indices it may go to (None: all)."""
        hashes = self.prompt_hashes(trace_request)
        totals = self.scores(hashes, now, candidates)
        best = max(totals)
        tied = [i for i, s in enumerate(totals) if s == best]
        if candidates is not None:
            tied = [candidates[i] for i in tied]
        self._chosen = hashes
        if len(tied) == 1:
            return tied[0]
        if self._rng is None:
            self._rng = self._rng_source()
        return tied[int(self._rng.integers(len(tied)))]

    def add_worker(self) -> None:
        self.lru.append(OrderedDict())
        self._scraped = None   # a new pod: scraped at the next pick

    def sent(self, index: int) -> None:
        lru = self.lru[index]
        for key in self._chosen:
            if key in lru:
                lru.move_to_end(key)
            else:
                lru[key] = None
        capacity = self.cfg.lru_capacity_per_server
        while len(lru) > capacity:
            lru.popitem(last=False)
        self._chosen = []


def scrape(worker) -> tuple[int, float]:
    kv = worker.scheduler.kv
    return len(worker.scheduler.waiting) + len(worker.intake), kv.num_used / kv.num_usable


def matched_blocks(lru: OrderedDict, hashes: list[int]) -> int:
    count = 0
    for key in hashes:
        if key not in lru:
            break
        count += 1
    return count


def load_aware(waiting: int, threshold: int) -> float:
    if waiting == 0:
        return 0.5
    return 0.5 * (1.0 - min(waiting, threshold) / threshold)
