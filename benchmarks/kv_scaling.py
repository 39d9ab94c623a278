"""KV cache cost per request against prompt length: python benchmarks/kv_scaling.py [--requests N].

Drives `KvCache` (engine/kv/cache.py) the way vLLM's scheduler does for a trace replay with
prefix caching: each request looks up its prompt, is admitted in chunks of the token budget,
decodes its output a block at a time, and is freed. Prompts are 1x, 4x and 16x a base length,
either unshared (every hash_id is the request's own: only it reaches those prefixes) or with a
shared head (the first half of the hash_ids common to every request). The pool is sized to hold
a few requests, so blocks cycle and keyed blocks are evicted. Prints microseconds per request
and per prompt block (docs/performance.md, "Issue 24, second round").
"""

from __future__ import annotations

import argparse
import time

from servesim.engine.kv.cache import KvCache
from servesim.engine.request import Request
from servesim.workload.prompt import BlockKeys, PrefixInterner
from servesim.workload.trace import TraceRequest

BLOCK, TRACE_BLOCK, BUDGET, OUTPUT = 16, 512, 8192, 64


def _trace(n: int, length: int, shared_half: bool) -> list[TraceRequest]:
    per = -(-length // TRACE_BLOCK)
    head = per // 2 if shared_half else 0
    out, next_id = [], 10**6
    for i in range(n):
        own = tuple(range(next_id, next_id + per - head))
        next_id += per - head
        out.append(TraceRequest(request_id=i, arrival_ns=0, input_length=length, output_length=OUTPUT,
                                hash_ids=tuple(range(head)) + own))
    return out


def replay(n: int, length: int, shared_half: bool) -> float:
    """Seconds of KV cache work for `n` requests of `length` prompt tokens, one after another
    with four in flight (the oldest is freed as the next is admitted)."""
    trace = _trace(n, length, shared_half)
    interner = PrefixInterner()
    interner.count_requests(trace, TRACE_BLOCK)
    blocks_per = -(-(length + OUTPUT) // BLOCK)
    cache = KvCache(num_gpu_blocks=6 * blocks_per, block_size=BLOCK, enable_caching=True,
                    max_model_len=1 << 20)
    live: list[Request] = []
    start = time.perf_counter()
    for t in trace:
        keys = BlockKeys(t.request_id, t.input_length, t.hash_ids, BLOCK, TRACE_BLOCK, interner)
        request = Request(t.request_id, 0, 0, length, OUTPUT, OUTPUT, keys)
        hits = cache.lookup(request)
        first = min(BUDGET, length - len(hits) * BLOCK)
        assert cache.admit(request, hits, first, bool(live))
        request.num_computed = len(hits) * BLOCK + first
        while request.num_computed < length:
            chunk = min(BUDGET, length - request.num_computed)
            assert cache.allocate(request, chunk)
            request.num_computed += chunk
        for _ in range(OUTPUT // BLOCK):
            assert cache.allocate(request, BLOCK)
            request.num_computed += BLOCK
            request.num_output += BLOCK
        live.append(request)
        if len(live) == 4:
            cache.free(live.pop(0))
    for request in live:
        cache.free(request)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--base", type=int, default=2048, help="prompt tokens at 1x")
    args = parser.parse_args()
    print("| prompt | scale | blocks | µs / request | ns / prompt block |")
    print("|---|---|---|---|---|")
    for shared in (False, True):
        for scale in (1, 4, 16):
            length = args.base * scale
            seconds = min(replay(args.requests, length, shared) for _ in range(3))
            per_request = seconds / args.requests
            print(f"| {'half shared' if shared else 'unshared'} | {scale}x | {length // BLOCK} "
                  f"| {per_request * 1e6:.1f} | {per_request / (length // BLOCK) * 1e9:.0f} |")


if __name__ == "__main__":
    main()
