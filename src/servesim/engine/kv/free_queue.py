"""The keyed part of the KV cache's free queue, and the eviction of keys as blocks leave it.

`KvCache` (engine/kv/cache.py, whose docstring states the design) keeps its LRU free queue as
runs: a `_FreedRun` per free of keyed blocks, and dead runs whose keys died with their request.
This module is that queue's side of the cache: taking blocks from its front (the plain and never
used blocks first, then runs from the oldest, each evicting its blocks' keys), and the keys'
removal, a chunk's tail at a time where the blocks are a prefix id's cached head.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from itertools import takewhile
from operator import itemgetter

from servesim.workload.prompt import _END_BITS

_END_MASK = (1 << _END_BITS) - 1
_SPAN_FIRST = itemgetter(1)   # a span's first block (BlockKeys.chunk_spans)
_OWN_KEY = (0).__gt__         # a request's own content (BlockKeys.private_keys) has a negative key


class _FreedRun(list):
    """Keyed blocks released by one free, in block order: the queue evicts from the end
    (a request's tail first, as vLLM appends a request's blocks tail first). `keys` holds
    their cache keys, position for position: a block's key is known from the request that
    frees it, so blocks need no key of their own. Or, when the run is the request's shared
    blocks `base` .. (keys None), `chain` is the request's `BlockKeys`: the keys are never
    built, since an eviction finds each prefix id's chunk from the block's position."""

    __slots__ = ("serial", "keys", "chain", "base")

    def __init__(self, blocks, keys: list[int] | None, serial: int, chain=None, base: int = 0) -> None:
        super().__init__(blocks)
        self.keys = keys
        self.serial = serial
        self.chain = chain
        self.base = base

    def keys_of(self, start: int, stop: int) -> list[int]:
        """The keys of the run's blocks start .. stop-1 (not to be changed in place)."""
        if self.keys is not None:
            return self.keys[start:stop]
        return self.chain.shared_keys(self.base + start, self.base + stop)


class FreeQueue:
    """Taking blocks from the free queue and evicting their keys; `KvCache` holds the state."""

    def take(self, count: int, into: list[int]) -> None:
        """Pop `count` free blocks from the front of the queue into `into`, evicting keys."""
        if count <= 0:
            return
        plain = self.free_plain
        if count <= len(plain):   # the usual case once the pool has cycled: freed unkeyed blocks
            into.extend(plain[-count:])
            del plain[-count:]
            return
        from_plain = len(plain)
        remaining = count - from_plain
        fresh = self.num_blocks - self.fresh_next
        if remaining < fresh:
            fresh = remaining
        if fresh:
            # The fresh ids lie below every freed block in the plain queue.
            first = self.fresh_next
            self.fresh_next = first + fresh
            into.extend(range(first + fresh - 1, first - 1, -1))
            self.ref_cnt.extend([0] * fresh)
            remaining -= fresh
        if from_plain:
            into.extend(plain[-from_plain:])
            del plain[-from_plain:]
        if not remaining:
            return
        lru = self.lru
        popleft = lru.popleft
        left_queue = self.left_queue
        while remaining:
            entry = popleft()
            if entry.__class__ is _FreedRun:
                keys = entry.keys
                serial = entry.serial
                while remaining and entry:
                    count = len(entry)
                    if remaining < count:
                        count = remaining
                    part = entry[-count:]
                    del entry[-count:]
                    if keys is None:   # keyed by position: the part is blocks lo .. of the chain
                        part_keys = None
                        lo = entry.base + len(entry)
                    else:
                        part_keys = keys[-count:]
                        del keys[-count:]
                    # isdisjoint stops at the first shared block and builds nothing: the usual case.
                    if left_queue and not left_queue.keys().isdisjoint(part):
                        marked = left_queue.keys() & part
                        # This is the oldest run, so a block still free here has no other copy
                        # queued: its mark has served and goes. Copies further in wait until taken.
                        # Only the marked blocks are looked at one by one (a set meet, in C).
                        stale = {b for b in marked if left_queue[b] >= serial}
                        if stale:
                            self.stale -= len(stale)
                            cut = len(stale)
                            if stale == set(part[:cut]):
                                # The usual shape: a hit takes a head of a chain, so the stale
                                # copies are the part's first blocks (a run's blocks are distinct).
                                part = part[cut:]
                                if part_keys is None:
                                    lo += cut
                                else:
                                    part_keys = part_keys[cut:]
                            else:
                                if part_keys is None:
                                    part_keys = entry.chain.shared_keys(lo, lo + count)
                                live = [i for i, b in enumerate(part) if b not in stale]
                                part, part_keys = [part[i] for i in live], [part_keys[i] for i in live]
                            marked -= stale
                        for b in marked:
                            del left_queue[b]
                    if part:
                        self.evicted = True
                        if part_keys is None:
                            self._evict_chain(part, entry.chain, lo)
                        else:
                            self._evict(part, part_keys)
                    into.extend(part)
                    self.keyed_free -= len(part)
                    remaining -= len(part)
                if entry:
                    lru.appendleft(entry)
                continue
            # A dead run: its keys died with its request.
            part = entry if len(entry) <= remaining else entry[-remaining:]
            taken = len(part)
            into.extend(part)
            self.keyed_free -= taken
            remaining -= taken
            if part is not entry:
                del entry[-taken:]
                lru.appendleft(entry)

    def _still_free(self, blocks: list[int], keys: list[int], serial: int) -> tuple[list[int], list[int]]:
        """Those of a run's blocks (queued at `serial`) that no hit took since, with their keys."""
        left_queue = self.left_queue
        live = [i for i, b in enumerate(blocks) if left_queue.get(b, -1) < serial]
        return [blocks[i] for i in live], [keys[i] for i in live]

    def _compact_queue(self) -> None:
        """Drop stale copies (left by hits on free blocks) once they outnumber the free blocks."""
        kept: deque[list[int]] = deque()
        for entry in self.lru:
            if entry.__class__ is _FreedRun:
                blocks, keys = self._still_free(entry, entry.keys_of(0, len(entry)), entry.serial)
                if not blocks:
                    continue
                entry = _FreedRun(blocks, keys, entry.serial)
            kept.append(entry)
        self.lru = kept
        self.left_queue = {}
        self.stale = 0

    def _evict_chain(self, blocks: list[int], chain, lo: int) -> None:
        """`_evict` for blocks lo .. of a request's shared blocks (`chain`, its BlockKeys), found
        by position: block j is position j - first of its span's chunk (`chunk_spans`)."""
        if self.extra:   # second copies are found by key
            self._evict(blocks, chain.shared_keys(lo, lo + len(blocks)))
            return
        chunks = self.chunks
        spans = chain.chunk_spans()
        end = lo + len(blocks)   # positions in the chain: blocks[j - lo] is position j
        index = bisect_right(spans, end - 1, key=_SPAN_FIRST) - 1
        while end > lo:
            node, first, _, _ = spans[index]
            chunk = chunks[node]
            # The blocks first .. end-1 of the chain must be the chunk's tail (a head of the span).
            if first >= lo:   # the whole chunk goes
                if end - first != len(chunk) or chunk != blocks[first - lo:end - lo]:
                    break
                del chunks[node]
                end = first
            else:
                if end - first != len(chunk) or chunk[lo - first:] != blocks[:end - lo]:
                    break
                del chunk[lo - first:]
                return
            index -= 1
        else:
            return
        self._evict(blocks[:end - lo], chain.shared_keys(lo, end))   # not a chunk's tail: key by key

    def _evict(self, blocks: list[int], keys: list[int]) -> None:
        """Drop the keys of evicted blocks: a run's deepest, in block order, with their keys."""
        if keys[-1] < 0:
            # A preempted request's own blocks, cached past its shareable prefix: deeper than
            # any shareable block of the run, so they go first; then the rest as below.
            own = list(takewhile(_OWN_KEY, reversed(keys)))   # deepest first
            count = len(own)
            self._uncache_own(own, blocks[:-count - 1:-1])
            if count == len(keys):
                return
            blocks, keys = blocks[:-count], keys[:-count]
        if keys[-1] > 0 and (not self.extra or self.extra.keys().isdisjoint(keys)):
            # The usual case: shareable contents each held by this block alone. The deepest
            # blocks of a chain go first, so each prefix id's chunk loses its tail: one slice
            # a prefix id, checked against the blocks (a block holds one key).
            chunks = self.chunks
            block_size = self.block_size
            end = len(keys)
            while end:
                key = keys[end - 1]
                node = key >> _END_BITS
                chunk = chunks[node]
                last = ((key & _END_MASK) - chunk.first_end) // block_size
                count = min(end, last + 1)
                if last != len(chunk) - 1 or chunk[last + 1 - count:] != blocks[end - count:end]:
                    break   # not a tail of one chunk: key by key below
                if count == len(chunk):
                    del chunks[node]
                else:
                    del chunk[last + 1 - count:]
                end -= count
            else:
                return
            blocks, keys = blocks[:end], keys[:end]
        for block, key in zip(reversed(blocks), reversed(keys)):   # deepest first
            self._uncache(key, block)

    def _uncache_own(self, keys, blocks: list[int]) -> None:
        """`_uncache` of each of a request's own keys with its block, in order: where no key is
        held by two blocks (`repeated`), each one's entry is its block alone and goes, in C."""
        repeated = self.repeated
        if repeated and not repeated.isdisjoint(keys):
            for key, block in zip(keys, blocks):
                self._uncache(key, block)
            return
        deque(map(self.cache.__delitem__, keys), 0)

    def _uncache(self, key: int, block: int) -> None:
        if key > 0:
            chunk = self.chunks[key >> _END_BITS]
            index = ((key & _END_MASK) - chunk.first_end) // self.block_size
            copies = self.extra.get(key)
            if copies is None:
                assert index == len(chunk) - 1 and chunk[index] == block, "a chain's head is evicted before its tail"
                if index:
                    chunk.pop()
                else:
                    del self.chunks[key >> _END_BITS]
                return
            if chunk[index] == block:
                chunk[index] = copies.pop(0)
            else:
                copies.remove(block)
            if not copies:
                del self.extra[key]
            return
        entry = self.cache[key]
        if entry.__class__ is int:
            del self.cache[key]
        else:
            entry.remove(block)
            if len(entry) == 1:
                self.cache[key] = entry[0]
                self.repeated.discard(key)
