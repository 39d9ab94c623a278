"""vLLM's paged KV cache with prefix caching, at a cost that does not grow with private blocks.

The contract is `ReferenceKvCache`'s (engine/kv/reference_cache.py, vLLM 0.32's
block pool; see docs/modeling/vllm.md). What changes is bookkeeping, in four
observations:

- Only blocks whose content another request can share (leading prompt blocks
  made of trace hash_id tokens) can be hit by others. Every later block holds
  request-unique tokens: only the request itself, after a preemption, could
  hit it. Such blocks are given their cache keys lazily: at preemption, where
  the request may come back for them. At finish they can never be hit again.
- Free blocks without a key are interchangeable, and so are the keyed blocks a
  finished request frees: their keys are dead. Such a request's keyed private
  blocks therefore enter the LRU queue as one "dead run" entry (its own block
  list, cut in place), and allocation takes from a run in one slice.
- Reference counts matter only for keyed blocks: an unkeyed block is held by
  exactly the request that allocated it.
- The keyed blocks one free releases enter the LRU queue as one entry (a
  `_FreedRun`), not one entry each. A prefix hit that takes a free block back
  leaves a stale copy in its run; the run tells it apart by when it was queued
  (`serial`) against when the hit took the block (`left_queue`), only when the
  copy comes to be evicted. So a free costs one pass over the request's keyed
  blocks and one queue entry.
- A shareable block's key is (the interned hash_id prefix holding its last token,
  its end), and a chain's keys are cached as a head of the chain (blocks are keyed
  in order, and a chain's deeper blocks are evicted no earlier than its shallower
  ones). So the cached blocks of one prefix id's run of blocks (`BlockKeys.chunk_spans`;
  32 blocks of 16 tokens for a trace block of 512) are always a head of that run: they
  are kept as one list per prefix id (`_Chunk`). A hit, an insertion and the eviction
  of a run's tail cost a step per prefix id, not a dictionary operation per block.
- A shared block that its request cached itself is held by that request alone until
  another request hits it, so its reference count (1) is not stored: it stays 0, and
  the request's `_Hold` says from which of its blocks on the counts are implicit. A
  lookup that hits such blocks stores their counts first (`_materialize`); the chunk
  the owner extended names its hold, so the lookup finds it. So caching and freeing a
  block nobody else holds costs no Python step, only list work.

So a request costs O(1) plus O(its shareable prompt blocks) in list work, not O(its
blocks), and O(its prefix ids) in dictionary work.
Block ids, the free count, the LRU order of every block that can still be hit,
and therefore every prefix hit and every eviction are the same as the reference's.
The free queue's side (taking blocks from it, evicting their keys) is engine/kv/free_queue.py;
a router's reading of the prefix chunks is engine/kv/router_view.py, and one take for a batch of
requests (SGLang's and TensorRT-LLM's decode) engine/kv/batch_allocation.py.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from itertools import islice
from operator import itemgetter

from servesim.engine.kv.batch_allocation import BatchAllocation
from servesim.engine.kv.free_queue import _SPAN_FIRST, FreeQueue, _FreedRun
from servesim.engine.kv.router_view import RouterView
from servesim.engine.request import Request

_ENDED = 1 << 62              # an ended hold's `lo`: past every block, so nothing of it is implicit


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class _Chunk(list):
    """The cached blocks of one prefix id's shared blocks (`BlockKeys.chunk_spans`), in block
    order: always a head of them, since a chain's keys are cached as a head. `first_end` is
    the end of the first one, whose key is the prefix id's base plus it. `lazy` is the hold
    of the request that last extended it (None: nobody), whose blocks from `lazy.lo` on may
    sit in its tail with their counts not stored."""

    __slots__ = ("first_end", "lazy")


class _Hold:
    """A request's blocks `lo` .. (its keyed shared blocks' end) are held by it alone, and
    their reference counts (1) are not stored. Only while `request.kv_hold is self`: a free
    ends it, and a later admission of the request makes a new one."""

    __slots__ = ("request", "lo")

    def __init__(self, request: Request, lo: int) -> None:
        self.request = request
        self.lo = lo


class KvCache(RouterView, BatchAllocation, FreeQueue):
    host = None   # KV offload runs on the reference cache (engine/kv/host_tier.py)

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
        # Blocks never handed out yet are not materialised: they are the ids from
        # `fresh_next` up, in id order at the back of the plain free queue. Per-block
        # lists grow as they are first taken, so memory follows the blocks in use, not
        # the pool (an SGLang pool of 1-token pages on a big GPU has tens of millions).
        self.num_blocks = num_gpu_blocks
        self.fresh_next = 1                          # block 0 is the null block
        self.ref_cnt = [0]                           # meaningful for keyed blocks
        self.free_plain: list[int] = []              # freed unkeyed blocks; top = front of the queue
        # Keyed part of the free queue in eviction order: runs of live keyed blocks
        # (`_FreedRun`, one per free) and dead runs (plain lists of blocks whose keys died
        # with their finished request). A prefix hit takes a block out of the queue lazily:
        # `left_queue[block]` is the serial current when a hit took it while it was free, so
        # its copy in any run queued at or before that serial is stale (`stale` counts those
        # copies). Runs sit in the queue in serial order, so the front run is the oldest: a
        # block taken from it still free has no other copy queued, and its mark can go.
        self.lru: deque[list[int]] = deque()
        self.serial = 0
        self.left_queue: dict[int, int] = {}
        self.stale = 0
        self.keyed_free = 0
        # Shareable contents, by prefix id: the blocks holding the head of its shared blocks
        # that is cached, so a prompt's hit or insertion costs one step per prefix id, not
        # per block. A key held by more blocks than one (two requests computed it before
        # either cached it) has the first in its chunk and the others in `extra`, in the order
        # they were cached (a hit takes the first; an eviction of it promotes the next).
        self.chunks: dict[int, _Chunk] = {}
        self.extra: dict[int, list[int]] = {}
        # A request's own contents (negative keys), cached at a preemption only.
        self.cache: dict[int, int | list[int]] = {}  # key -> block(s) holding it, in insertion order
        self.repeated: set[int] = set()   # keys two or more blocks hold (their entry is a list)
        self.epoch = 0   # bumped when blocks are freed or keys inserted (see FastVllmScheduler)
        # What the run asked of the pool's size, for a sweep that proves a sibling trial with
        # more blocks computes this same run (engine/vllm/shared_runs.py): whether a capacity
        # check ever failed, a prefix lookup ever hit, a keyed block was ever evicted.
        self.refused = False
        self.hit = False
        self.evicted = False

    # ------------------------------------------------------------------ queries

    @property
    def num_free(self) -> int:
        return len(self.free_plain) + self.num_blocks - self.fresh_next + self.keyed_free

    @property
    def num_used(self) -> int:
        # `num_free` written out: the collector asks this once a pass
        return self.num_usable - (len(self.free_plain) + self.num_blocks - self.fresh_next + self.keyed_free)

    def lookup(self, request: Request) -> list[int]:
        if not self.enable_caching:
            return []
        hits: list[int] = []
        keys = request.keys
        limit = (request.num_tokens - 1) // self.block_size
        shared = keys.shared_blocks
        if limit < shared:   # (conditionals, not min(): a builtin call parses its arguments)
            shared = limit
        if shared:
            chunks = self.chunks
            for node, first, stop, _ in keys.chunk_spans():
                if first >= shared:
                    break
                chunk = chunks.get(node)
                if chunk is None:
                    return hits
                wanted = (stop if stop < shared else shared) - first
                hold = chunk.lazy
                if hold is not None and hold.lo < first + wanted:
                    # Another request's blocks held by it alone: their counts become stored,
                    # so the admission, `is_evictable` and frees see them.
                    self._materialize(hold, first + min(wanted, len(chunk)))
                if len(chunk) < wanted:   # the cached head ends inside this prefix id's blocks
                    hits += chunk
                    return hits
                hits += chunk[:wanted]
        if limit > shared:   # own blocks, cached before a preemption
            own = keys.private_keys(shared, limit)
            cache = self.cache
            if own[0] in cache:
                # A preempted request's own blocks are usually cached all but a tail: look them all
                # up in C and keep those before the first miss.
                found = list(map(cache.get, own))
                if None in found:
                    del found[found.index(None):]
                if self.repeated:
                    found = [entry if entry.__class__ is int else entry[0] for entry in found]
                hits += found
        return hits

    def lookup_host(self, request: Request, gpu_hits: int) -> int:
        return 0

    def _materialize(self, hold: _Hold, upto: int) -> None:
        """Store the counts of a hold's blocks before `upto` (a block index of its request):
        from then on they are counted like any other."""
        if hold.request.kv_hold is not hold:
            return   # its request freed them: they are free, count 0, as stored
        if upto > hold.lo:
            ref_cnt = self.ref_cnt
            for b in hold.request.blocks[hold.lo:upto]:
                ref_cnt[b] = 1
            hold.lo = upto

    # ------------------------------------------------------------------ allocation

    def is_evictable(self, block: int) -> bool:
        """A cached block no request holds: free, but a prefix hit on it would take it."""
        return self.ref_cnt[block] == 0   # asked of hits only, and every hit has its key

    def admit(self, request: Request, hits: list[int], num_new_tokens: int, has_running: bool,
              cache: bool = True, full_sequence: bool | None = None, loaded: int = 0, lookahead: int = 0) -> bool:
        block_size = self.block_size
        ref_cnt = self.ref_cnt
        num_hits = len(hits)
        if hits:
            self.hit = True
        evictable = list(map(ref_cnt.__getitem__, hits)).count(0)   # hits are keyed blocks (counted in C)
        watermark = self.watermark_blocks if has_running else 0
        full_tokens = request.num_tokens
        if full_tokens > self.max_model_len:
            full_tokens = self.max_model_len
        # (ceil_div and max() written out: a call a request each, in the admission path)
        need_full = -(-full_tokens // block_size) - num_hits
        if need_full < 0:
            need_full = 0
        need_full += evictable
        if full_sequence is None:
            full_sequence = self.full_sequence_admission
        if not full_sequence:  # a backend that budgets admission itself (SGLang, TensorRT-LLM)
            need_full = max(ceil_div(min(len(hits) * block_size + num_new_tokens, self.max_model_len),
                                     block_size) - len(hits), 0) + evictable
        if need_full + watermark > self.num_free:
            self.refused = True
            return False
        hit_tokens = num_hits * block_size
        slots = hit_tokens + num_new_tokens + lookahead
        if slots > self.max_model_len:
            slots = self.max_model_len
        if lookahead and max(ceil_div(slots, block_size) - num_hits, 0) + evictable + watermark > self.num_free:
            self.refused = True
            return False
        self.keyed_free -= evictable
        if evictable:   # free blocks leave the queue: their copies there go stale
            serial = self.serial
            left_queue = self.left_queue
            for b in hits:
                if not ref_cnt[b]:
                    left_queue[b] = serial
                ref_cnt[b] += 1
            self.stale += evictable
        else:
            for b in hits:
                ref_cnt[b] += 1
        request.blocks = list(hits)
        request.num_cached_blocks = num_hits
        if self.enable_caching:
            shared = request.keys.shared_blocks
            # Hits past the shareable prefix are the request's own blocks, kept from before
            # a preemption: they still have their keys.
            request.live_private = num_hits - shared if num_hits > shared else 0
            # The shared blocks it caches from here on are its alone until a lookup hits them.
            if shared:   # (a prompt no other request reaches has none: no hold to make)
                request.kv_hold = _Hold(request, num_hits if num_hits < shared else shared)
        self.take(-(-slots // block_size) - num_hits, request.blocks)
        if cache:  # False while a KV transfer has yet to fill the blocks (vLLM's delay_cache_blocks)
            filled = hit_tokens + num_new_tokens
            if filled > request.num_tokens:
                filled = request.num_tokens
            self.cache_full_blocks(request, filled)
        return True

    def allocate(self, request: Request, num_new_tokens: int, lookahead: int = 0) -> bool:
        computed = request.num_computed + num_new_tokens
        block_size = self.block_size
        slots = computed + lookahead
        if slots > self.max_model_len:
            slots = self.max_model_len
        need = -(-slots // block_size) - len(request.blocks)
        if need > 0:
            if need > self.num_free:
                self.refused = True
                return False
            self.take(need, request.blocks)
        # Per-request backends call this for every decode token: skip the call when no block fills.
        if self.enable_caching:
            filled = request.prompt_len + request.num_output
            if computed < filled:
                filled = computed
            if filled // block_size > request.num_cached_blocks:
                self.cache_full_blocks(request, filled)
        return True

    def _insert(self, key: int, block: int) -> None:
        entry = self.cache.get(key)
        if entry is None:
            self.cache[key] = block
        elif entry.__class__ is int:
            self.cache[key] = [entry, block]
            self.repeated.add(key)
        else:
            entry.append(block)

    def _insert_own(self, keys: range, blocks: list[int]) -> None:
        """`_insert` of a request's own keys (`BlockKeys.private_keys`) with their blocks: in one
        step in C where none of them is cached yet (the usual case: a block past the shareable
        prefix is cached only at its request's preemption, and its hits are not inserted again)."""
        cache = self.cache
        if cache.keys().isdisjoint(keys):
            cache.update(zip(keys, blocks))
            return
        for key, block in zip(keys, blocks):
            self._insert(key, block)

    def cache_full_blocks(self, request: Request, num_tokens: int) -> None:
        """Mark the request's full blocks up to `num_tokens` as cached; only shareable ones get keys now."""
        if not self.enable_caching:
            return
        full = num_tokens // self.block_size
        start = request.num_cached_blocks
        if full <= start:
            return
        keys = request.keys
        shared_end = keys.shared_blocks
        if full < shared_end:
            shared_end = full
        if start < shared_end:
            blocks = request.blocks
            hold = request.kv_hold
            if hold is None:   # admitted without a hold: count every block (none is implicit)
                ref_cnt = self.ref_cnt
                for b in blocks[start:shared_end]:
                    ref_cnt[b] = 1
            # Otherwise the new blocks join the hold's implicit ones (blocks hold.lo .. start).
            chunks = self.chunks
            spans = keys.chunk_spans()
            # Chunked prefill keys a long prompt a piece at a time: start at the piece's span.
            get = chunks.get
            for node, first, stop, first_end in islice(spans, bisect_right(spans, start, key=_SPAN_FIRST) - 1, None):
                if first >= shared_end:
                    break
                low = start if start > first else first
                high = shared_end if shared_end < stop else stop
                chunk = get(node)
                if chunk is None:
                    # Nobody holds these contents. Blocks are keyed in order and a chain's
                    # deeper blocks are evicted no earlier than its shallower ones, so the
                    # cache holds a head of every chain: this request's earlier blocks of
                    # the prefix id would be in it.
                    assert low == first, "a chain's later key is cached without its head"
                    chunk = chunks[node] = _Chunk(blocks[low:high])
                    chunk.first_end = first_end
                    chunk.lazy = hold
                    continue
                cached = first + len(chunk)
                assert cached >= low, "a chain's later key is cached without its head"
                if cached > low:   # contents other blocks hold too: vLLM keeps every copy
                    extra = self.extra
                    copied = min(cached, high)
                    for key, block in zip(keys.shared_keys(low, copied), blocks[low:copied]):
                        extra.setdefault(key, []).append(block)
                    if hold is not None:
                        # Copies are not in the chunk, where a lookup looks for implicit counts:
                        # count them, and every implicit block before them, so the hold's stay a tail.
                        self._materialize(hold, copied)
                if high > cached:
                    other = chunk.lazy
                    if other is not None and other is not hold and other.lo < cached:
                        # The chunk's tail is about to be this request's: the last extender's
                        # implicit blocks in it get counted first (a lookup would not find them).
                        self._materialize(other, cached)
                    chunk.lazy = hold
                    chunk += blocks[max(low, cached):high]
            self.epoch += 1
        request.num_cached_blocks = full

    def free(self, request: Request, finished: bool = True, keep_blocks: int | None = None) -> None:
        """Release a request's blocks, tail first; `finished` says its private keys are dead.

        Past `keep_blocks`, the blocks the request holds alone lose their keys (shared ones too).
        """
        self.epoch += 1
        blocks = request.blocks
        request.blocks = []
        hold = request.kv_hold
        request.kv_hold = None   # its implicit counts end here (see _Hold)
        if hold is not None:
            implicit = hold.lo
            # Chunks this request extended still name its hold: past every block index, it makes
            # their lookups and take-overs skip it without a call (nothing of it is implicit now).
            hold.lo = _ENDED
        cached = keyed_before = request.num_cached_blocks
        dropped = None   # shared blocks past `keep_blocks` whose keys the cut dropped (positions)
        if keep_blocks is not None and keep_blocks < cached:
            cached = max(keep_blocks, min(request.keys.shared_blocks, len(blocks)) if self.enable_caching else 0)
            if self.enable_caching:
                # Blocks keyed before (hits on its own blocks after an earlier preemption) past the cut.
                live_end = min(request.keys.shared_blocks, len(blocks)) + request.live_private
                key_of = request.keys.key
                for j in range(cached, live_end):
                    self._uncache(key_of(j), blocks[j])
                    self.ref_cnt[blocks[j]] = 0   # a free block's count is 0 (see _Hold)
                request.live_private = max(0, min(request.live_private, cached - request.keys.shared_blocks))
                # Shared blocks can reach past the cut too: a session turn's keys go on over its
                # output (`TraceRequest.content_length`), and SGLang keeps only the prompt. The
                # reference drops the key of every block past the cut that this request holds
                # alone (count 1) and keeps the others' (another request holds them: only its
                # count drops). Deepest first, as an eviction does; such blocks go free unkeyed.
                keyed_end = min(request.keys.shared_blocks, len(blocks), keyed_before)
                if keep_blocks < keyed_end:
                    ref_cnt = self.ref_cnt
                    if hold is not None and implicit < keyed_end:
                        for b in blocks[implicit:keyed_end]:   # implicit counts (1) become stored
                            ref_cnt[b] = 1
                        implicit = keyed_end
                    dropped = [j for j in range(keep_blocks, keyed_end) if ref_cnt[blocks[j]] == 1]
                    for j in reversed(dropped):
                        self._uncache(key_of(j), blocks[j])
                        ref_cnt[blocks[j]] = 0
        request.num_cached_blocks = 0
        live_private = request.live_private
        request.live_private = 0
        if not self.enable_caching:
            self.free_plain.extend(blocks)
            return
        shared = request.keys.shared_blocks
        if len(blocks) < shared:
            shared = len(blocks)
        keyed_shared = shared if shared < keyed_before else keyed_before   # hits and cached blocks: every one has its key
        plain = self.free_plain
        plain.extend(blocks[shared if shared > cached else cached:])    # not yet cached: front of the queue
        plain.extend(reversed(blocks[keyed_shared:shared]))
        if dropped:   # unkeyed now (interchangeable: their order in the plain queue is not observable)
            plain.extend([blocks[j] for j in reversed(dropped)])
        lru = self.lru
        ref_cnt = self.ref_cnt
        freed: list[int] = []
        keys: list[int] | None = []
        base = -1   # >= 0: freed is the shared blocks from this one on, keyed by position
        if keyed_shared:
            # Blocks `counted` on have their counts implicit (1, stored 0): they go free as they are.
            counted = keyed_shared if hold is None or implicit > keyed_shared else implicit
            held = blocks[:counted]
            if counted > 1:
                counts = itemgetter(*held)(ref_cnt)
            else:
                counts = (ref_cnt[held[0]],) if counted else ()
            alone = counts.index(1) if 1 in counts else counted   # the first block it alone holds
            if not dropped and counts.count(1) == counted - alone:
                # The usual case: others hold a head of its blocks (hits shared with them), and
                # the tail is its alone. The tail goes free, with a copy of its keys (a run trims
                # them as its blocks are evicted; the request keeps its own list).
                for b in held[:alone]:
                    ref_cnt[b] -= 1
                if alone < keyed_shared:
                    for b in held[alone:]:
                        ref_cnt[b] = 0
                    freed = blocks[alone:keyed_shared]
                    keys, base = None, alone   # no key list: the run finds chunks by position
            else:
                if dropped:   # already free and unkeyed: leave them out (a cut's, so rare: a set is fine)
                    skip = set(dropped)
                    kept = [j for j in range(counted) if j not in skip]
                    held = [blocks[j] for j in kept]
                    held_keys = list(map(request.keys.key, kept))
                else:
                    held_keys = request.keys.shared_keys(0, counted)
                for b in held:
                    count = ref_cnt[b] - 1
                    ref_cnt[b] = count
                    if not count:
                        freed.append(b)
                keys = [key for b, key in zip(held, held_keys) if not ref_cnt[b]]
                freed += blocks[counted:keyed_shared]
                keys += request.keys.shared_keys(counted, keyed_shared)
        if cached > shared:
            if finished and live_private:   # its keys die with it
                hit_own = blocks[shared:shared + live_private]
                self._uncache_own(request.keys.private_keys(shared, shared + live_private), hit_own)
                for b in hit_own:
                    ref_cnt[b] = 0   # hits on them counted them: a free block's count is 0 (see _Hold)
            if finished:
                # The request's list becomes the dead run (deeper than the shared blocks: queued
                # before them), cut in place rather than copied: its private blocks cost no
                # Python step and no reference count each.
                del blocks[cached:]
                del blocks[:shared]
                lru.append(blocks)
                self.keyed_free += cached - shared
            else:
                if base >= 0:
                    keys, base = list(request.keys.shared_keys(base, keyed_shared)), -1
                keyed_private = blocks[shared:cached]
                own = request.keys.private_keys
                unkeyed = shared + live_private   # its hits kept their keys; the rest get keys now
                self._insert_own(own(unkeyed, cached), blocks[unkeyed:cached])
                for b in keyed_private:
                    ref_cnt[b] = 0
                freed.extend(keyed_private)
                keys.extend(own(shared, cached))
        if freed:
            self.serial += 1
            lru.append(_FreedRun(freed, keys, self.serial, request.keys, base))   # (base read only without keys)
            self.keyed_free += len(freed)
        if self.stale > self.keyed_free + 4096:
            self._compact_queue()
