"""The memory check no configuration skips: weights, the engine's reserve and a pinned KV cache.

Each backend sizes its KV cache from what is left after the weights and what it reserves
(deployment.py holds the byte counts). A KV size given outright (vLLM `num_gpu_blocks`,
SGLang `max_total_tokens`, TensorRT-LLM `max_tokens`) replaces that sizing but not the
physics: the weights must still fit, and so must the pinned cache.
- vLLM 0.32 allocates a pinned number of blocks whatever its profile found: its check is
  vLLM's own, in engine/vllm/defaults.py (`check_pinned_vllm_blocks`).
- SGLang 0.5.9 (`ModelRunner`, max_total_tokens) and TensorRT-LLM (`KvCacheConfig.max_tokens`)
  take the smaller of the pinned size and what their memory fraction leaves, so a larger pin
  would silently not be what ran: here it is an error naming the size the engine would use.
All figures are per GPU; a worker's KV count covers its attention-DP ranks, each with its own cache.
"""

from __future__ import annotations

from servesim.errors import ServesimError
from servesim.hardware.deployment import Deployment, gib


def per_rank(total: int, attention_dp: int) -> int:
    """One attention-DP rank's share of a worker's KV count (rounded up)."""
    return -(-total // attention_dp)


def check_pinned_tokens(where: str, knob: str, d: Deployment, tokens: int, left: float, spent: str,
                        engine: str, engine_tokens: int) -> None:
    """A pinned KV size in tokens against `left` bytes per GPU; `engine_tokens` is what the engine would use."""
    need = per_rank(tokens, d.attention_dp) * d.kv_bytes_per_token_per_gpu()
    if tokens > engine_tokens:
        raise ServesimError(
            f"{where}.{knob}: {tokens:,} tokens need {gib(need)} of KV cache per GPU but only {gib(left)} is "
            f"left after {spent}; {engine} would cap the cache at {engine_tokens:,} tokens, so use at most "
            "that or leave it null"
        )


def check_context_fits(where: str, context: int, capacity_tokens: int, knob: str) -> None:
    if capacity_tokens < context:
        raise ServesimError(
            f"{where}: a {context}-token context does not fit in the KV cache, which holds {capacity_tokens} "
            f"tokens ({context - capacity_tokens} short); lower the context length or raise {knob}"
        )
