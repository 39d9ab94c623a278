"""A host-memory tier under the GPU prefix cache (KV offload).

Follows the contract of vLLM's CPU offloading connector and SGLang's hierarchical
cache (HiCache) in the form the issue fixes: a block whose cache key leaves GPU
memory (its block is reused for something else) is kept in host memory, least
recently used first out; a later prefix lookup that ends on the GPU continues in
the host tier, and the blocks found there are copied back over the host link
instead of being recomputed. Their copy time is added to the pass that admits the
request (docs/modeling/kv_offload.md). The host keeps its copy after a load.

The tier sits under the reference cache (engine/kv/reference_cache.py), where every
full block has its key; runs with offload use it (see cluster/fleet.py).
"""

from __future__ import annotations

from collections import OrderedDict


class HostTier:
    def __init__(self, capacity_blocks: int, load_ns_per_block: int) -> None:
        self.capacity = capacity_blocks
        self.load_ns_per_block = load_ns_per_block
        self.entries: OrderedDict[int, int] = OrderedDict()   # key -> 1, least recently used first
        self.size = 0
        self.stored_blocks = 0
        self.loaded_blocks = 0

    def store(self, key: int) -> None:
        if key in self.entries:
            self.entries.move_to_end(key)
            return
        self.entries[key] = 1
        self.size += 1
        self.stored_blocks += 1
        self._trim()

    def _trim(self) -> None:
        entries = self.entries
        while self.size > self.capacity:
            entries.popitem(last=False)
            self.size -= 1

    def hits(self, keys) -> int:
        """Leading keys present in host memory (each touched as recently used)."""
        entries = self.entries
        count = 0
        for key in keys:
            if key not in entries:
                break
            entries.move_to_end(key)
            count += 1
        return count
