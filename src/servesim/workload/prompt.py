"""Token content of prompts, reduced to what prefix caching can observe.

A trace `hash_id` stands for `trace_block_size` tokens whose content is a fixed
function of (hash_id, position in that block). A prompt is its hash_ids'
tokens in order, cut to `input_length` and padded with request-unique tokens;
output tokens are unique to their request, except where the request's
`content_length` says its hash_ids go on over its output (a session turn,
workload/sessions.py: the next turn's prompt holds that output). Two requests therefore hold equal
tokens in engine block j (tokens [j·B, (j+1)·B)) exactly when both prompts
cover that block with hash_id tokens and their hash_id prefixes up to the
block's last token agree.

So the content key of engine block j is either
- shared: (the interned hash_id prefix reaching token (j+1)·B, (j+1)·B), or
- unique: (request, j) for any block touching padding or output tokens.
Equal keys mean equal chained block hashes in vLLM; keys are plain ints.
"""

from __future__ import annotations

from collections import Counter
from itertools import chain, repeat

_END_BITS = 32
_MAX_END = 1 << _END_BITS
_TWO_GT = (2).__gt__


class PrefixInterner:
    """Gives every distinct hash_id prefix a small integer id (shared across requests).

    When the whole trace is known up front, `count_requests` records how many requests
    reach each prefix. A prefix only one request reaches can never be hit by another, so
    its blocks are that request's own (unique keys): the fast KV cache then keeps them in
    its cheap private form instead of caching every block of a trace whose prompts rarely
    repeat. Hits are unchanged: no other request could have produced those keys.
    """

    def __init__(self) -> None:
        self._nodes: dict[tuple[int, int], int] = {}
        self.counts: dict[int, int] | None = None
        # The shareable prefix ids counted up front, by hash_ids, with the hash_ids they were
        # counted over: every role's block keys ask for them again (a prompt's hash_ids tuple
        # hashes in C; interning walks it in Python).
        self._counted: dict[tuple[int, ...], tuple[list[int], int]] = {}

    def count_requests(self, requests, trace_block_size: int) -> None:
        """Count the requests reaching each prefix, interning only prefixes two can share.

        A hash_id that no other request's prompt holds (counted over the hash_ids the prompts
        reach) ends every prefix holding it to this request alone: the walk stops there, so
        a prompt's private tail costs one C-level count per hash_id, not an interning each.
        """
        reached = []
        for request in requests:
            hash_ids = request.hash_ids
            if hash_ids:
                covered = len(hash_ids) * trace_block_size
                if request.input_length < covered:   # (not min(): a builtin call parses its arguments)
                    covered = request.input_length
                reach = -(-covered // trace_block_size)
                reached.append((hash_ids, reach))
        held = Counter(chain.from_iterable(hash_ids[:reach] for hash_ids, reach in reached))
        holders = held.__getitem__   # every hash_id reached is in it, at least once
        reached_ids: list[list[int]] = []
        counted = self._counted
        for hash_ids, reach in reached:
            # The walk stops at the first hash_id only this prompt holds (count 1), found in C.
            heads = list(map(holders, hash_ids[:reach]))
            nodes = self.prefix_ids(hash_ids, heads.index(1) if 1 in heads else reach)
            known = counted.get(hash_ids)
            if known is None or reach > known[1]:
                counted[hash_ids] = (nodes, reach)
            reached_ids.append(nodes)
        self.counts = dict(Counter(chain.from_iterable(reached_ids)))

    def shared_reach(self, prefix_ids: list[int]) -> int:
        """How many leading prefixes more than one request reaches (all of them when uncounted)."""
        counts = self.counts
        if counts is None:
            return len(prefix_ids)
        # The first prefix under two requests, in C: (2).__gt__(count) is count < 2.
        alone = list(map(_TWO_GT, map(counts.get, prefix_ids, repeat(0, len(prefix_ids)))))
        return alone.index(True) if True in alone else len(prefix_ids)

    def shared_prefix_ids(self, hash_ids: tuple[int, ...], count: int) -> list[int]:
        """The ids of hash_ids[:1], ..., hash_ids[:count] up to the first that only one request
        reaches (all of them when uncounted)."""
        if self.counts is not None:
            known = self._counted.get(hash_ids)
            if known is not None:
                nodes, reach = known
                if count <= reach or len(nodes) < reach:
                    # Past a counted head's cut every prefix holds a hash_id of this request alone.
                    nodes = nodes[:count]
                    return nodes[:self.shared_reach(nodes)]
        nodes = self.prefix_ids(hash_ids, count)
        return nodes[:self.shared_reach(nodes)]

    def prefix_ids(self, hash_ids: tuple[int, ...], count: int) -> list[int]:
        """Ids of hash_ids[:1], hash_ids[:2], ..., hash_ids[:count]."""
        nodes = self._nodes
        out = []
        parent = 0
        append = out.append
        for h in hash_ids[:count]:
            parent = nodes.setdefault((parent, h), len(nodes) + 1)   # new ids number 1, 2, ...
            append(parent)
        return out


class BlockKeys:
    """Content keys of one request's engine blocks (see the module docstring)."""

    __slots__ = ("_prefix_ids", "shared_blocks", "_unique_base", "_block_size", "_trace_block_size", "_shared",
                 "_spans")

    def __init__(
        self,
        request_id: int,
        input_length: int,   # the tokens hash_ids may cover (TraceRequest.content_length, else the prompt)
        hash_ids: tuple[int, ...] | None,
        block_size: int,
        trace_block_size: int,
        interner: PrefixInterner,
    ) -> None:
        self._block_size = block_size
        self._trace_block_size = trace_block_size
        self._unique_base = -(request_id << _END_BITS) - 1
        self._shared: list[int] | None = None
        self._spans: list[tuple[int, int, int, int]] | None = None
        if hash_ids:
            # (conditionals, not min(): a builtin call parses its arguments; a call a request)
            covered = len(hash_ids) * trace_block_size
            if input_length < covered:
                covered = input_length
            needed = -(-(covered // block_size) * block_size // trace_block_size)
            prefix_ids = interner.shared_prefix_ids(hash_ids, needed)
            if len(prefix_ids) < needed:   # past them the prompt is this request's alone
                reached = len(prefix_ids) * trace_block_size
                if reached < covered:
                    covered = reached
            self.shared_blocks = covered // block_size
            self._prefix_ids = prefix_ids
        else:
            self.shared_blocks = 0
            self._prefix_ids = []

    @property
    def block_size(self) -> int:
        return self._block_size

    # Blocks 0 .. shared_blocks-1 have keys other requests may share (positive ints);
    # every later block's key is unique to this request (negative).

    def key(self, block_index: int) -> int:
        if block_index < self.shared_blocks:
            end = (block_index + 1) * self._block_size
            trace_blocks = -(-end // self._trace_block_size)
            return self._prefix_ids[trace_blocks - 1] * _MAX_END + end
        return self._unique_base - block_index

    def private_keys(self, start: int, stop: int) -> range:
        """Keys of blocks start .. stop-1, all at or past `shared_blocks`: the request's own, one
        arithmetic run (`key` of each, without a call a block)."""
        return range(self._unique_base - start, self._unique_base - stop, -1)

    def chunk_spans(self) -> list[tuple[int, int, int, int]]:
        """The shared blocks grouped by the prefix id their keys carry, in order: (prefix id,
        first block, block after the last, the first block's end). Block j's key is the id
        of the trace block holding its last token, so each group is a run of blocks, the
        same run for every request whose prompt reaches that prefix (computed once)."""
        spans = self._spans
        if spans is None:
            # Block j ends at (j+1)·size, inside trace block ceil(end / trace) - 1.
            size, trace = self._block_size, self._trace_block_size
            last_end = self.shared_blocks * size
            if trace % size == 0:
                spans = self._spans = self._aligned_spans(size, trace // size)
                return spans
            spans = self._spans = []
            for i, node in enumerate(self._prefix_ids):
                low = (i * trace // size + 1) * size    # the first block end past i·trace
                high = min((i + 1) * trace, last_end)
                if low > high:
                    if low > last_end:
                        break
                    continue
                spans.append((node, low // size - 1, high // size, low))
        return spans

    def _aligned_spans(self, size: int, per: int) -> list[tuple[int, int, int, int]]:
        """`chunk_spans` where a trace block holds `per` whole engine blocks: span i is blocks
        i·per .. (i+1)·per - 1, the last cut at `shared_blocks`, built in C (zip over ranges)."""
        shared = self.shared_blocks
        count = -(-shared // per)   # spans reaching a shared block (shared <= prefix ids · per)
        spans = list(zip(self._prefix_ids[:count], range(0, count * per, per), range(per, (count + 1) * per, per),
                         range(size, size + count * per * size, per * size)))
        if count and spans[-1][2] > shared:
            node, first, _, first_end = spans[-1]
            spans[-1] = (node, first, shared, first_end)
        return spans

    def shared_keys(self, start: int, stop: int) -> list[int]:
        """Keys of blocks start .. stop-1, all below `shared_blocks` (computed once per request:
        the router asks for them on every worker, the cache again at admission)."""
        shared = self._shared
        if shared is None:
            # Each group's keys are one arithmetic run: its prefix id's base plus the ends in it.
            size = self._block_size
            shared = self._shared = []
            extend = shared.extend
            for node, first, stop_block, first_end in self.chunk_spans():
                base = node * _MAX_END
                extend(range(base + first_end, base + stop_block * size + 1, size))
        if start == 0 and stop == len(shared):
            return shared
        return shared[start:stop]
