"""vLLM's paged KV cache with prefix caching, modelled block by block (the reference).

`engine/kv/cache.py` holds the same contract in a form whose cost does not grow
with the number of blocks a request holds; this one is kept as the readable
reference, used by the reference scheduler and held equal by tests.

Follows vLLM 0.32 `v1/core/block_pool.py`, `kv_cache_manager.py` and
`single_type_kv_cache_manager.py` (full attention, one KV group); the rules
are written out in docs/modeling/vllm.md. In short:

- `num_gpu_blocks` blocks, of which block 0 is vLLM's null block: the rest are
  usable. A block holds `block_size` tokens.
- A full block whose tokens are all known gets a content key (its chained
  hash) when it is allocated or, in async mode, when its last token arrives.
  Keyed blocks form the prefix cache; several blocks may share a key.
- Free blocks form one queue: unkeyed blocks at the front (reused first),
  keyed blocks behind them in the order they were freed (LRU eviction).
  A request's blocks are freed tail first. Allocation pops from the front and
  drops a popped block's key. A prefix hit on a free keyed block takes it
  out of the queue.
- The hit of a request is the longest run of cached blocks from its start,
  capped at `num_tokens - 1` tokens, whole blocks only.
"""

from __future__ import annotations

from collections import OrderedDict

from servesim.engine.kv.host_tier import HostTier
from servesim.engine.request import Request


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class ReferenceKvCache:
    def __init__(
        self,
        num_gpu_blocks: int,
        block_size: int,
        enable_caching: bool,
        max_model_len: int,
        watermark_blocks: int = 0,
        full_sequence_admission: bool = True,
    ) -> None:
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.max_model_len = max_model_len
        self.watermark_blocks = watermark_blocks
        # The backend's admission mode (engine/backend.py): vLLM admits a request only if its whole
        # sequence fits; SGLang and TensorRT-LLM budget admission themselves, so only this pass's tokens.
        self.full_sequence_admission = full_sequence_admission
        self.num_usable = num_gpu_blocks - 1
        # Ids from `fresh_next` up were never handed out: they sit, in id order, at the
        # back of the unkeyed free queue, and the per-block lists grow as they are taken
        # (a pool of 1-token pages can hold tens of millions of blocks).
        self.num_blocks = num_gpu_blocks
        self.fresh_next = 1                  # block 0 is the null block
        self.ref_cnt = [0]
        self.block_key: list[int | None] = [None]
        # The freed unkeyed part of the free queue, as a stack whose top is the queue's front.
        self.free_plain: list[int] = []
        # The keyed part, in eviction order. (An OrderedDict pops its oldest entry in
        # O(1); a plain dict's first key gets slow to find after many deletions.)
        self.free_keyed: OrderedDict[int, None] = OrderedDict()
        # key -> one block, or a list of blocks in insertion order when a key repeats.
        self.cache: dict[int, int | list[int]] = {}
        # Bumped whenever blocks return to the free queue or keys enter the cache: the only
        # changes that can let a waiting request in that did not fit before.
        self.epoch = 0
        self.host: HostTier | None = None   # KV offload: where evicted keys go

    # ------------------------------------------------------------------ queries

    @property
    def num_free(self) -> int:
        """Free blocks, evictable cached ones included (vLLM's get_num_free_blocks)."""
        return len(self.free_plain) + self.num_blocks - self.fresh_next + len(self.free_keyed)

    @property
    def num_used(self) -> int:
        return self.num_usable - self.num_free

    def lookup(self, request: Request) -> list[int]:
        """Blocks of the longest cached prefix of the request's known tokens."""
        if not self.enable_caching:
            return []
        hits: list[int] = []
        cache = self.cache
        key = request.keys.key
        for j in range((request.num_tokens - 1) // self.block_size):
            entry = cache.get(key(j))
            if entry is None:
                break
            hits.append(entry if isinstance(entry, int) else entry[0])
        return hits

    def lookup_host(self, request: Request, gpu_hits: int) -> int:
        """Blocks after the GPU hits that the host tier holds (to be loaded, not computed)."""
        if self.host is None:
            return 0
        key = request.keys.key
        end = (request.num_tokens - 1) // self.block_size
        return self.host.hits(key(j) for j in range(gpu_hits, end))

    def cached_prefix_blocks(self, keys, heard: dict[int, int] | None = None) -> int:
        """How many leading blocks of a prompt (its shareable keys) this cache holds: a router's
        view; with `heard` (a router's index of it), the shorter head of the two."""
        if not self.enable_caching or keys is None or not keys.shared_blocks:
            return 0
        cache = self.cache
        count = 0
        for key in keys.shared_keys(0, keys.shared_blocks):
            if key not in cache:
                break
            count += 1
        if heard is None:
            return count
        announced = 0
        for node, first, stop, _ in keys.chunk_spans():
            if announced >= count:
                break
            seen = heard.get(node, 0)
            if seen < stop - first:
                announced += seen
                break
            announced += stop - first
        return min(count, announced)

    def span_heads(self, keys, into: dict[int, int], keyed: int | None = None) -> None:
        """Per prefix id of the prompt (with `keyed`, those whose blocks start below it), how
        many of its blocks this cache holds from the span's first: a router's index entries."""
        cache = self.cache
        for node, first, stop, _ in keys.chunk_spans():
            if keyed is not None and first >= keyed:
                return
            count = 0
            for key in keys.shared_keys(first, stop):
                if key not in cache:
                    break
                count += 1
            into[node] = count

    # ------------------------------------------------------------------ allocation

    def is_evictable(self, block: int) -> bool:
        """A cached block no request holds: free, but a prefix hit on it would take it."""
        return self.ref_cnt[block] == 0

    def admit(self, request: Request, hits: list[int], num_new_tokens: int, has_running: bool,
              cache: bool = True, full_sequence: bool | None = None, loaded: int = 0, lookahead: int = 0) -> bool:
        """Allocate for a waiting request's first chunk, if its whole sequence fits.

        vLLM admits only if blocks for the request's *whole* current sequence are
        free (`full_sequence_must_fit`), counting hit blocks that sit in the free
        queue as needed too, plus the watermark when something is running. The blocks it
        takes now (its first chunk plus `lookahead` slots: EAGLE's drafter writes KV past
        the verified positions) must be free as well.
        """
        block_size = self.block_size
        evictable = sum(1 for b in hits if self.ref_cnt[b] == 0)
        watermark = self.watermark_blocks if has_running else 0
        full_tokens = min(request.num_tokens, self.max_model_len)
        need_full = max(ceil_div(full_tokens, block_size) - len(hits), 0) + evictable
        if full_sequence is None:
            full_sequence = self.full_sequence_admission
        if not full_sequence:  # a backend that budgets admission itself (SGLang, TensorRT-LLM)
            need_full = max(ceil_div(min((len(hits) + loaded) * block_size + num_new_tokens, self.max_model_len),
                                     block_size) - len(hits), 0) + evictable
        if need_full + watermark > self.num_free:
            return False
        hit_tokens = (len(hits) + loaded) * block_size
        slots = min(hit_tokens + num_new_tokens + lookahead, self.max_model_len)
        if lookahead and max(ceil_div(slots, block_size) - len(hits), 0) + evictable + watermark > self.num_free:
            return False
        for b in hits:
            if self.ref_cnt[b] == 0:
                del self.free_keyed[b]
            self.ref_cnt[b] += 1
        request.blocks = list(hits)
        request.num_cached_blocks = len(hits)
        self._grow(request, ceil_div(slots, block_size) - len(hits))
        if cache:  # False while a KV transfer has yet to fill the blocks (vLLM's delay_cache_blocks)
            self.cache_full_blocks(request, min(hit_tokens + num_new_tokens, request.num_tokens))
        return True

    def allocate(self, request: Request, num_new_tokens: int, lookahead: int = 0) -> bool:
        """Blocks for a running request's next chunk (and `lookahead` slots past it); False if too few are free."""
        slots = min(request.num_computed + num_new_tokens + lookahead, self.max_model_len)
        need = ceil_div(slots, self.block_size) - len(request.blocks)
        if need > 0:
            if need > self.num_free:
                return False
            self._grow(request, need)
        self.cache_full_blocks(request, min(request.num_computed + num_new_tokens, request.num_tokens))
        return True

    def allocate_each(self, requests: list[Request], tokens: list[int]) -> bool:
        """`allocate(request, count)` for each pair in order, if every one of them fits; else nothing, False."""
        total = sum(max(ceil_div(min(r.num_computed + count, self.max_model_len), self.block_size) - len(r.blocks), 0)
                    for r, count in zip(requests, tokens))
        if total > self.num_free:
            return False
        for request, count in zip(requests, tokens):
            self.allocate(request, count)
        return True

    def _grow(self, request: Request, count: int) -> None:
        self.take(count, request.blocks)

    def take(self, count: int, into: list[int]) -> None:
        """Pop `count` free blocks (unkeyed first, then keyed in LRU order, evicting) into `into`."""
        ref_cnt = self.ref_cnt
        plain = self.free_plain
        from_plain = min(count, len(plain))
        fresh = min(count - from_plain, self.num_blocks - self.fresh_next)
        if fresh:
            first = self.fresh_next
            self.fresh_next = first + fresh
            into.extend(range(first + fresh - 1, first - 1, -1))
            ref_cnt.extend([1] * fresh)
            self.block_key.extend([None] * fresh)
        if from_plain:
            taken = plain[-from_plain:]
            del plain[-from_plain:]
            for b in taken:
                ref_cnt[b] = 1
            into.extend(taken)
        for _ in range(count - from_plain - fresh):
            b = self.free_keyed.popitem(last=False)[0]
            self._evict(b)
            ref_cnt[b] = 1
            into.append(b)

    def _evict(self, block: int) -> None:
        key = self._drop_key(block)
        if self.host is not None and key not in self.cache:
            self.host.store(key)   # its last GPU copy is gone

    def _drop_key(self, block: int) -> int:
        key = self.block_key[block]
        self.block_key[block] = None
        entry = self.cache[key]
        if isinstance(entry, int):
            del self.cache[key]
        else:
            entry.remove(block)
            if not entry:
                del self.cache[key]
        return key

    def cache_full_blocks(self, request: Request, num_tokens: int) -> None:
        """Give keys to the request's full blocks up to `num_tokens` known tokens."""
        if not self.enable_caching:
            return
        full = num_tokens // self.block_size
        start = request.num_cached_blocks
        if full <= start:
            return
        key_of = request.keys.key
        cache = self.cache
        self.epoch += 1
        for j in range(start, full):
            b = request.blocks[j]
            key = key_of(j)
            self.block_key[b] = key
            entry = cache.get(key)
            if entry is None:
                cache[key] = b
            elif isinstance(entry, int):
                cache[key] = [entry, b]
            else:
                entry.append(b)
        request.num_cached_blocks = full

    def free(self, request: Request, finished: bool = True, keep_blocks: int | None = None) -> None:
        """Release a request's blocks, tail first; past `keep_blocks`, its own blocks lose their keys."""
        ref_cnt = self.ref_cnt
        keyed = self.enable_caching
        self.epoch += 1
        if keyed and keep_blocks is not None:
            for b in request.blocks[keep_blocks:]:
                if self.block_key[b] is not None and ref_cnt[b] == 1:
                    self._drop_key(b)
        for b in reversed(request.blocks):
            ref_cnt[b] -= 1
            if ref_cnt[b] == 0:
                if keyed and self.block_key[b] is not None:
                    self.free_keyed[b] = None
                else:
                    self.free_plain.append(b)
        request.blocks = []
        request.num_cached_blocks = 0
