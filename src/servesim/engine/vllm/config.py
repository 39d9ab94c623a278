"""vLLM's scheduler settings, as `vllm serve` spells them (the `engine.workers.*.scheduler` schema)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from servesim.schema_base import NonNegativeInt, PositiveInt, Probability, StrictModel


class VllmSchedulerConfig(StrictModel):
    """vLLM's scheduler and cache settings, named as its CLI flags."""

    backend_name: ClassVar[str] = "vllm"   # its entry in engine/registry.py

    max_num_seqs: PositiveInt | None = None
    max_num_batched_tokens: PositiveInt | None = None
    block_size: PositiveInt = 16
    num_gpu_blocks: Annotated[int, Field(ge=2)] | None = None
    max_model_len: PositiveInt | None = None
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    long_prefill_token_threshold: NonNegativeInt = 0
    async_scheduling: bool | None = None
    watermark: Annotated[float, Field(ge=0, lt=1)] = 0.0
    # The largest pass (tokens) replayed from CUDA graphs (compilation_config); null:
    # min(max_num_seqs × (1 + speculative tokens) × 2, 512, max_num_batched_tokens).
    max_cudagraph_capture_size: PositiveInt | None = None

    # The same facts under every backend's own names (see the other two schedulers).
    @property
    def kv_block_size(self) -> int:
        return self.block_size

    @property
    def prefix_caching(self) -> bool:
        return self.enable_prefix_caching

    @property
    def context_limit(self) -> int:
        return self.max_model_len

    def output_room(self, input_length: int) -> int:
        return self.max_model_len - input_length

    @property
    def kv_blocks(self) -> int:
        return self.num_gpu_blocks   # vLLM's count includes its null block

    @property
    def overlap(self) -> bool:
        return self.async_scheduling
