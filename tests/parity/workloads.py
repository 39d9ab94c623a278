"""Parity workloads: each a list of requests plus vLLM scheduler settings.

Arrival times carry a random nanosecond-resolution offset so they never fall on
a pass end (the oracle's open-loop reading of such an instant differs from
servesim's documented reaction rule; see docs/modeling/vllm.md). The test
checks that no arrival coincides with a pass end in servesim's schedule.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

SHARED = Path(__file__).resolve().parents[3] / "shared"
MOONCAKE = SHARED / "traces" / "mooncake" / "conversation_trace.jsonl"


def _jitter(rng: random.Random) -> float:
    """A sub-millisecond offset in ms with nanosecond resolution."""
    return rng.randrange(1, 999_999) / 1e6


def _req(rng, t_ms, inp, out, hash_ids=None):
    row = {"timestamp": round(t_ms + _jitter(rng), 6), "input_length": inp, "output_length": out}
    if hash_ids is not None:
        row["hash_ids"] = hash_ids
    return row


def preemption_tiny_kv():
    rng = random.Random(1)
    rows = [_req(rng, 0, 40, 40) for _ in range(8)]
    return rows, dict(block_size=16, num_gpu_blocks=20, max_num_seqs=8, max_num_batched_tokens=512,
                      max_model_len=128, enable_prefix_caching=True), 16


def preemption_staggered_shared():
    rng = random.Random(2)
    rows = []
    for i in range(30):
        g = rng.randrange(3)
        rows.append(_req(rng, rng.uniform(0, 300), rng.randint(20, 120), rng.randint(10, 60),
                         [g * 100 + k for k in range(6)]))
    rows.sort(key=lambda r: r["timestamp"])
    return rows, dict(block_size=16, num_gpu_blocks=40, max_num_seqs=16, max_num_batched_tokens=256,
                      max_model_len=256), 16


def prefix_sharing():
    rng = random.Random(3)
    rows = []
    for i in range(24):
        g = i % 4
        n_shared = 3 + g
        rows.append(_req(rng, i * 7.0, n_shared * 16 + rng.randint(5, 40), rng.randint(4, 12),
                         [g * 100 + k for k in range(n_shared)]))
    return rows, dict(block_size=16, num_gpu_blocks=400, max_num_seqs=16, max_num_batched_tokens=1024,
                      max_model_len=512), 16


def partial_trace_blocks():
    """trace_block_size 20 is not a multiple of block_size 16; prompts end inside trace blocks."""
    rng = random.Random(4)
    rows = []
    for i in range(24):
        g = i % 3
        n_ids = 4 + g
        inp = rng.randint(n_ids * 20 - 19, n_ids * 20)  # cut inside the last trace block
        rows.append(_req(rng, i * 11.0, inp, rng.randint(3, 9), [g * 50 + k for k in range(n_ids)]))
    return rows, dict(block_size=16, num_gpu_blocks=300, max_num_seqs=8, max_num_batched_tokens=512,
                      max_model_len=256), 20


def chunked_small_budget():
    rng = random.Random(5)
    rows, t = [], 0.0
    for i in range(14):
        rows.append(_req(rng, t, rng.choice([20, 90, 150, 300]), rng.randint(3, 10)))
        t += rng.randint(0, 40)
    return rows, dict(block_size=16, num_gpu_blocks=200, max_num_seqs=4, max_num_batched_tokens=64,
                      max_model_len=512, enable_prefix_caching=False), 16


def long_prefill_threshold():
    rows, cfg, tbs = chunked_small_budget()
    return rows, dict(cfg, long_prefill_token_threshold=32), tbs


def chunked_disabled():
    rng = random.Random(7)
    rows, t = [], 0.0
    for i in range(16):
        rows.append(_req(rng, t, rng.choice([30, 100, 200, 400]), rng.randint(2, 8)))
        t += rng.randint(0, 25)
    return rows, dict(block_size=16, num_gpu_blocks=300, max_num_seqs=8, max_num_batched_tokens=512,
                      max_model_len=512, enable_chunked_prefill=False, enable_prefix_caching=False), 16


def chunked_disabled_with_threshold():
    rows, cfg, tbs = chunked_disabled()
    return rows, dict(cfg, long_prefill_token_threshold=64), tbs


def idle_gaps():
    rng = random.Random(9)
    rows = []
    for burst in range(5):
        start = burst * 400.0
        for i in range(rng.randint(1, 4)):
            rows.append(_req(rng, start + rng.uniform(0, 25), rng.randint(10, 80), rng.randint(2, 12)))
    rows.sort(key=lambda r: r["timestamp"])
    return rows, dict(block_size=16, num_gpu_blocks=200, max_num_seqs=8, max_num_batched_tokens=128,
                      max_model_len=256), 16


def max_num_seqs_cap():
    rng = random.Random(10)
    rows = [_req(rng, i * 3.0, rng.randint(10, 50), rng.randint(5, 20)) for i in range(12)]
    return rows, dict(block_size=16, num_gpu_blocks=200, max_num_seqs=2, max_num_batched_tokens=256,
                      max_model_len=256), 16


def watermark():
    rows, cfg, tbs = preemption_staggered_shared()
    return rows, dict(cfg, num_gpu_blocks=60, watermark=0.1), tbs


def mixed_poisson():
    rng = random.Random(12)
    rows, t = [], 0.0
    for i in range(80):
        t += rng.expovariate(1 / 15.0)
        g = rng.randrange(5)
        rows.append(_req(rng, t, rng.randint(16, 200), rng.randint(1, 40), [g * 10 + k for k in range(4)]))
    return rows, dict(block_size=16, num_gpu_blocks=70, max_num_seqs=32, max_num_batched_tokens=256,
                      max_model_len=512, long_prefill_token_threshold=64), 64


def mooncake_slice():
    """The first 40 Mooncake conversation requests, time-compressed 20x, in a KV cache that preempts."""
    rng = random.Random(13)
    rows = []
    with open(MOONCAKE) as fh:
        for _, line in zip(range(40), fh):
            r = json.loads(line)
            rows.append(_req(rng, r["timestamp"] / 20, r["input_length"], min(r["output_length"], 64),
                             r["hash_ids"]))
    rows.sort(key=lambda r: r["timestamp"])
    max_len = max(r["input_length"] + r["output_length"] for r in rows)
    return rows, dict(block_size=16, num_gpu_blocks=max_len // 16 + 60, max_num_seqs=64,
                      max_num_batched_tokens=2048, max_model_len=max_len), 512


def _random_stress(seed: int):
    """Random settings and 100 requests with shared prefixes, sized so preemption happens."""
    rng = random.Random(1000 + seed)
    block_size = rng.choice([8, 16, 32])
    trace_block_size = rng.choice([block_size, 2 * block_size, 24, 40])
    chunked = rng.random() < 0.75
    max_model_len = 384
    budget = rng.choice([64, 128, 256]) if chunked else 512
    rows, t = [], 0.0
    for _ in range(100):
        t += rng.expovariate(1 / rng.choice([2.0, 8.0, 30.0]))
        g = rng.randrange(6)
        n_ids = rng.randint(1, 6)
        rows.append(_req(rng, t, rng.randint(8, 250), rng.randint(1, 80),
                         [g * 100 + k for k in range(n_ids)] if rng.random() < 0.7 else None))
    settings = dict(
        block_size=block_size,
        num_gpu_blocks=max_model_len // block_size + rng.randint(2, 40),
        max_num_seqs=rng.choice([4, 16, 64]),
        max_num_batched_tokens=budget,
        max_model_len=max_model_len,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=rng.random() < 0.8,
        long_prefill_token_threshold=rng.choice([0, 0, 16, 48]),
    )
    settings["max_num_batched_tokens"] = max(settings["max_num_batched_tokens"], settings["max_num_seqs"])
    return rows, settings, trace_block_size


def random_stress_1():
    return _random_stress(1)


def random_stress_2():
    return _random_stress(2)


def random_stress_3():
    return _random_stress(3)


def random_stress_4():
    return _random_stress(4)


WORKLOADS = {
    f.__name__: f
    for f in (
        preemption_tiny_kv, preemption_staggered_shared, prefix_sharing, partial_trace_blocks,
        chunked_small_budget, long_prefill_threshold, chunked_disabled, chunked_disabled_with_threshold,
        idle_gaps, max_num_seqs_cap, watermark, mixed_poisson, mooncake_slice,
        random_stress_1, random_stress_2, random_stress_3, random_stress_4,
    )
}
