"""KV cache cost per request against prompt length: python benchmarks/kv_scaling.py [--requests N].

Drives `KvCache` (engine/kv/cache.py) the way vLLM's scheduler does for a trace replay with
prefix caching: each request looks up its prompt, is admitted in chunks of the token budget,
decodes its output a block at a time, and is freed. Prompts are 1x, 4x, 16x and 64x a base length,
unshared (every hash_id is the request's own: only it reaches those prefixes), cached alone
(every prompt block shareable, cached and evicted, never hit) or with a shared head (the first
half of the hash_ids common to every request). The pool is sized to hold
a few requests, so blocks cycle and keyed blocks are evicted. Prints microseconds per request
and per prompt block, and the slope between the shortest and longest (docs/performance.md, "Issue 24, second round").
"""

from __future__ import annotations

import argparse
import time

from servesim.engine.kv.cache import KvCache
from servesim.engine.request import Request
from servesim.workload.prompt import BlockKeys, PrefixInterner
from servesim.workload.trace import TraceRequest

BLOCK, TRACE_BLOCK, BUDGET, OUTPUT = 16, 512, 8192, 64


MODES = ("unshared", "cached alone", "half shared")


def _trace(n: int, length: int, mode: str) -> list[TraceRequest]:
    """`mode`: "unshared" (every hash_id the request's own), "cached alone" (request i + n/2
    repeats request i's hash_ids, so every prompt block is shareable and cached, but evicted
    long before its twin comes: never hit), "half shared" (the first half of the hash_ids
    common to every request: hit by every request)."""
    per = -(-length // TRACE_BLOCK)
    head = per // 2 if mode == "half shared" else 0
    out, next_id = [], 10**6
    for i in range(n):
        if mode == "cached alone" and i >= n // 2:
            own = out[i - n // 2].hash_ids
        else:
            own = tuple(range(head)) + tuple(range(next_id, next_id + per - head))
            next_id += per - head
        out.append(TraceRequest(request_id=i, arrival_ns=0, input_length=length, output_length=OUTPUT,
                                hash_ids=own))
    return out


def replay(n: int, length: int, mode: str) -> float:
    """CPU seconds of KV cache work for `n` requests of `length` prompt tokens, one after
    another with four in flight (the oldest is freed as the next is admitted)."""
    trace = _trace(n, length, mode)
    interner = PrefixInterner()
    interner.count_requests(trace, TRACE_BLOCK)
    blocks_per = -(-(length + OUTPUT) // BLOCK)
    cache = KvCache(num_gpu_blocks=6 * blocks_per, block_size=BLOCK, enable_caching=True,
                    max_model_len=1 << 20)
    live: list[Request] = []
    start = time.process_time()   # CPU time: a shared machine moves wall time more
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
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--base", type=int, default=2048, help="prompt tokens at 1x")
    parser.add_argument("--scales", default="1,4,16,64")
    parser.add_argument("--repeat", type=int, default=3, help="runs per cell; the fastest counts")
    parser.add_argument("--one", metavar="MODE:SCALE",
                        help="run one replay and print nothing (for an instruction counter: run it at two "
                             "--requests and take the difference over the requests added)")
    args = parser.parse_args()
    if args.one:
        mode, scale = args.one.rsplit(":", 1)
        replay(args.requests, args.base * int(scale), mode)
        return
    scales = [int(x) for x in args.scales.split(",")]
    print("| prompt | scale | blocks | µs / request | ns / prompt block |")
    print("|---|---|---|---|---|")
    for mode in MODES:
        cells = []
        for scale in scales:
            length = args.base * scale
            seconds = min(replay(args.requests, length, mode) for _ in range(args.repeat))
            per_request = seconds / args.requests
            cells.append((length // BLOCK, per_request))
            print(f"| {mode} | {scale}x | {length // BLOCK} "
                  f"| {per_request * 1e6:.1f} | {per_request / (length // BLOCK) * 1e9:.0f} |")
        (b0, t0), (b1, t1) = cells[0], cells[-1]
        if b1 > b0:   # the slope between the shortest and longest prompt: what a block adds
            slope = (t1 - t0) / (b1 - b0)
            print(f"| {mode} | slope | | {(t0 - slope * b0) * 1e6:.1f} at 0 blocks | {slope * 1e9:.1f} |")


if __name__ == "__main__":
    main()
