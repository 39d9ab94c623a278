"""The KV-event path from a worker's prefix cache to a `kv_aware` router's index
(docs/modeling/routing.md, "KV events").

vLLM 0.32's scheduler gathers the cache's BlockStored / BlockRemoved events as it makes them
and publishes them once per engine step, in `update_from_output`, after the pass's output
came back: every change made since the previous step's publication goes out together (under
async scheduling that includes the pass already scheduled behind the one that ended). The
worker-side publisher forwards the batch to the router's indexer, which applies it on
arrival. So a router deciding while a pass runs does not yet see the blocks that pass's
scheduling cached.

`PublishedPrefixes` is the router's index of one worker: per prefix id (a run of shareable
blocks, `BlockKeys.chunk_spans`) the head length its cache held at the last publication that
touched it, applied `delay_ns` after that pass end. Stores come from the requests with
prefill work in the passes scheduled since the previous publication, and from the requests
that finished in the pass (their last blocks are keyed then). A block's removal is seen at
once: the index never shows more than the cache holds (see the docs for why).
"""

from __future__ import annotations

from collections import deque


class PublishedPrefixes:
    """What a router's indexer has heard of one worker's prefix cache."""

    __slots__ = ("worker", "delay_ns", "heard", "in_flight", "_published")

    def __init__(self, worker, delay_ns: int) -> None:
        self.worker = worker
        self.delay_ns = delay_ns
        self.heard: dict[int, int] = {}   # prefix id -> cached head length (blocks), as announced
        # Batches on their way: (arrival ns, {prefix id: head length}), in arrival order.
        self.in_flight: deque[tuple[int, dict[int, int]]] = deque()
        self._published = None   # the pass scheduled behind the last one published, if any

    def publish(self, done, end_ns: int) -> None:
        """The worker's step that ends at `end_ns` publishes what its scheduler changed since
        the previous one: the passes scheduled since (the one that ended, unless it was
        scheduled behind the previous one and went out with it, and the one now behind it)."""
        outputs = []
        if done.scheduled is not self._published:
            outputs.append(done.scheduled)
        queued = getattr(self.worker, "queued", None)
        if queued is not None:
            outputs.append(queued)
        self._published = queued
        kv = self.worker.scheduler.kv
        batch: dict[int, int] = {}
        for output in outputs:
            for entry in output.entries:
                if not entry.is_decode:   # its prefill keyed its blocks up to num_cached_blocks
                    _touch(batch, kv, entry.request.keys, entry.request.num_cached_blocks)
        for request in done.finished:
            _touch(batch, kv, request.keys)
        if batch:
            self.in_flight.append((end_ns + self.delay_ns, batch))

    def receive(self, now: int) -> None:
        """Apply the batches that have reached the indexer by `now`."""
        in_flight, heard = self.in_flight, self.heard
        while in_flight and in_flight[0][0] <= now:
            heard.update(in_flight.popleft()[1])

    def cached_prefix_blocks(self, keys, now: int) -> int:
        """The prompt's leading blocks the router believes the worker holds at `now`: both the
        cache's and the index's views are a head of the prompt's blocks, so the blocks both
        hold are the shorter head (the index never shows more than the cache holds)."""
        in_flight = self.in_flight
        if in_flight and in_flight[0][0] <= now:
            self.receive(now)
        return self.worker.scheduler.kv.cached_prefix_blocks(keys, self.heard)


def _touch(batch: dict[int, int], kv, keys, keyed: int | None = None) -> None:
    """Announce the cache's head of every prefix id the prompt reaches (with `keyed`, of
    those whose blocks start below it: the rest this request has not stored yet)."""
    if keys is not None and keys.shared_blocks:
        kv.span_heads(keys, batch, keyed)


class PredictedPrefixes:
    """Dynamo's approximate indexer (`router.kv_events: none`, its `--no-kv-events`): no events
    at all; the router assumes a worker caches the full prompt blocks it sent there, each for
    `ttl_ns` after the last request that sent it (lib/llm/src/kv_router/approx.rs)."""

    __slots__ = ("worker", "ttl_ns", "expiry")

    def __init__(self, worker, ttl_ns: int) -> None:
        self.worker = worker
        self.ttl_ns = ttl_ns
        # Per prefix id: when each of its run's blocks expires, from the run's first. A send
        # refreshes a head of the run, so the times never rise along it.
        self.expiry: dict[int, list[int]] = {}

    def routed(self, keys, now: int) -> None:
        """A request with these prompt blocks was sent to the worker at `now`."""
        if keys is None or not keys.shared_blocks:
            return
        until = now + self.ttl_ns
        expiry = self.expiry
        for node, first, stop, _ in keys.chunk_spans():
            times = expiry.get(node)
            length = stop - first
            if times is None:
                expiry[node] = [until] * length
            else:
                times[:length] = [until] * length

    def cached_prefix_blocks(self, keys, now: int) -> int:
        if keys is None or not keys.shared_blocks:
            return 0
        count = 0
        for node, first, stop, _ in keys.chunk_spans():
            times = self.expiry.get(node)
            length = stop - first
            live = 0 if times is None else _live(times, now)
            if live < length:
                return count + live
            count += length
        return count

    def live_blocks(self, now: int) -> int:
        """Blocks the index holds for the worker at `now` (its share of Dynamo's tree)."""
        return sum(_live(times, now) for times in self.expiry.values())


def _live(times: list[int], now: int) -> int:
    """How many of a run's leading blocks have not expired by `now` (times never rise)."""
    low, high = 0, len(times)
    while low < high:
        mid = (low + high) // 2
        if times[mid] > now:
            low = mid + 1
        else:
            high = mid
    return low
