"""One `take` for a batch of requests' new blocks (`KvCache`, engine/kv/cache.py): SGLang's and
TensorRT-LLM's decode passes allocate every running request's next tokens at once. `KvCache`
holds the state; the free queue's `take` (engine/kv/free_queue.py) hands the blocks out."""

from __future__ import annotations

from servesim.engine.request import Request


class BatchAllocation:
    """`allocate` for many requests at once; `KvCache` holds the state."""

    def allocate_each(self, requests: list[Request], tokens: list[int]) -> bool:
        """`allocate(request, count)` for each pair in order, if every one of them fits; else nothing, False.

        One `take` serves them all. Which request gets which of the blocks differs from one
        `take` each, but blocks leave the free queue without keys, so that is unobservable.
        """
        block_size = self.block_size
        max_len = self.max_model_len
        needs = [-(-min(request.num_computed + count, max_len) // block_size) - len(request.blocks)
                 for request, count in zip(requests, tokens)]
        total = sum(need for need in needs if need > 0)
        if total > self.num_free:
            self.refused = True
            return False
        self.allocate_needs(requests, tokens, needs, total)
        return True

    def allocate_needs(self, requests: list[Request], tokens: list[int], needs: list[int], total: int) -> None:
        """`allocate_each` once its blocks are counted: `needs[i]` new blocks for requests[i]
        (<= 0: none), `total` the positive ones' sum, which fits. A caller that has counted them
        already (TensorRT-LLM's fast generation pass and decode group) skips the second count."""
        pool: list[int] = []
        self.take(total, pool)
        pos = 0
        caching = self.enable_caching
        block_size = self.block_size
        for request, count, need in zip(requests, tokens, needs):
            if need > 0:
                request.blocks.extend(pool[pos:pos + need])
                pos += need
            if caching:
                filled = min(request.num_computed + count, request.prompt_len + request.num_output)
                full = filled // block_size
                if full > request.num_cached_blocks:
                    if request.num_cached_blocks < request.keys.shared_blocks:
                        self.cache_full_blocks(request, filled)
                    else:
                        # What `cache_full_blocks` does past the shareable prefix (no key is given
                        # now), without the call: with one-token pages every decode fills a block,
                        # so this runs once a token (docs/performance.md, "Hot loops written out").
                        request.num_cached_blocks = full
