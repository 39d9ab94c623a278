"""The memory check no configuration skips: weights, the engine's reserve and a pinned KV cache.

Each backend sizes its KV cache from what is left after the weights and what it reserves
(deployment.py holds the byte counts). A KV size given outright (vLLM `num_gpu_blocks`,
SGLang `max_total_tokens`, TensorRT-LLM `max_tokens`) replaces that sizing but not the
physics: the weights must still fit, and so must the pinned cache.
- vLLM 0.32 (`v1/core/kv_cache_utils.py`, `num_gpu_blocks_override`) allocates the pinned
  number of blocks whatever its profile found, so a larger one runs the GPU out of memory:
  the limit is the whole device after weights, activations and the runtime reserve
  (gpu_memory_utilization does not apply to a pinned count).
- SGLang 0.5.9 (`ModelRunner`, max_total_tokens) and TensorRT-LLM (`KvCacheConfig.max_tokens`)
  take the smaller of the pinned size and what their memory fraction leaves, so a larger pin
  would silently not be what ran: here it is an error naming the size the engine would use.
All figures are per GPU; a worker's KV count covers its attention-DP ranks, each with its own cache.
"""

from __future__ import annotations

from servesim.errors import ServesimError
from servesim.hardware.deployment import GIB, RUNTIME_RESERVE_GIB, Deployment, gib


def _per_rank(total: int, attention_dp: int) -> int:
    return -(-total // attention_dp)


def check_pinned_vllm_blocks(where: str, d: Deployment, num_gpu_blocks: int, block_size: int,
                             max_num_batched_tokens: int, max_num_seqs: int) -> None:
    """`num_gpu_blocks` (all attention-DP ranks together) against the whole GPU."""
    memory = d.gpu.memory_gib * GIB
    left = d.vllm_kv_bytes_left(memory, f"the {gib(memory)} of one {d.gpu.name}", max_num_batched_tokens,
                                max_num_seqs)
    per_block = block_size * d.kv_bytes_per_token_per_gpu()
    need = _per_rank(num_gpu_blocks, d.attention_dp) * per_block
    if need <= left:
        return
    most = int(left // per_block) * d.attention_dp
    activations = d.activation_bytes(max_num_batched_tokens, max_num_seqs)
    raise ServesimError(
        f"{where}.num_gpu_blocks: {num_gpu_blocks:,} blocks need {gib(need)} of KV cache per GPU but only "
        f"{gib(left)} is left after weights ({gib(d.weight_bytes_per_gpu())}), activations ({gib(activations)}) "
        f"and the runtime reserve ({gib(RUNTIME_RESERVE_GIB * GIB)}) on the {gib(memory)} {d.gpu.name}; vLLM "
        f"would allocate them all and run out of memory, so use at most {most:,} or leave it null"
    )


def check_pinned_tokens(where: str, knob: str, d: Deployment, tokens: int, left: float, spent: str,
                        engine: str, engine_tokens: int) -> None:
    """A pinned KV size in tokens against `left` bytes per GPU; `engine_tokens` is what the engine would use."""
    need = _per_rank(tokens, d.attention_dp) * d.kv_bytes_per_token_per_gpu()
    if tokens > engine_tokens:
        raise ServesimError(
            f"{where}.{knob}: {tokens:,} tokens need {gib(need)} of KV cache per GPU but only {gib(left)} is "
            f"left after {spent}; {engine} would cap the cache at {engine_tokens:,} tokens, so use at most "
            "that or leave it null"
        )
