"""What a router reads of a `KvCache` (engine/kv/cache.py): how much of a prompt's shareable
prefix the cache holds, walked per prefix id over its chunks (`BlockKeys.chunk_spans`), never
per block. `KvCache` holds the state; cluster/kv_router.py and cluster/kv_events.py ask."""

from __future__ import annotations


class RouterView:
    """The prefix chunks as a router sees them; `KvCache` holds the state."""

    def cached_prefix_blocks(self, keys, heard: dict[int, int] | None = None) -> int:
        """How many leading blocks of a prompt (its shareable keys) this cache holds: a router's
        view. With `heard` (a router's index of this cache: per prefix id the head it was told
        of, cluster/kv_events.py), the blocks both hold: the shorter of two heads, so one walk
        ends at the first prefix id either holds only in part."""
        if not self.enable_caching or keys is None or not keys.shared_blocks:
            return 0
        chunks = self.chunks
        count = 0
        for node, first, stop, _ in keys.chunk_spans():
            chunk = chunks.get(node)
            if chunk is None:
                return count
            length = stop - first
            held = len(chunk)   # may pass the span: another prompt reaches further into the trace block
            if heard is not None:
                seen = heard.get(node, 0)
                if seen < held:
                    held = seen
            if held < length:
                return count + held
            count += length
        return count

    def span_heads(self, keys, into: dict[int, int], keyed: int | None = None) -> None:
        """Per prefix id of the prompt (with `keyed`, those whose blocks start below it), how
        many of its blocks this cache holds from the span's first: a router's index entries."""
        chunks = self.chunks
        for node, first, stop, _ in keys.chunk_spans():
            if keyed is not None and first >= keyed:
                return
            chunk = chunks.get(node)
            if chunk is None:
                into[node] = 0
            else:
                held = len(chunk)
                into[node] = held if held < stop - first else stop - first
