"""A tiny vLLM worker and three prefix-sharing requests that make the host KV tier work (test_kv_offload.py,
and the reporting tests that show its hits)."""

from __future__ import annotations

# Llama-3.1-8B in bf16: 32 layers × 8 KV heads × 128 dims × (K, V) × 2 bytes = 131,072 bytes
# a token; a 4-token block is 524,288 bytes, which takes 524,288 ns over a 1 GB/s link.
BLOCK_NS = 524_288
VLLM = {"block_size": 4, "num_gpu_blocks": 11, "max_model_len": 40, "async_scheduling": False}
ROWS = [
    {"timestamp": 0, "input_length": 16, "output_length": 1, "hash_ids": [1, 2, 3, 4]},
    {"timestamp": 20, "input_length": 36, "output_length": 1, "hash_ids": list(range(11, 20))},
    {"timestamp": 40, "input_length": 20, "output_length": 1, "hash_ids": [1, 2, 3, 4, 5]},
]


def offload(host_gb, bandwidth=1.0):
    return {"kv_offload": {"host_gb": host_gb, "bandwidth_gb_s": bandwidth}}
