"""TensorRT-LLM's scheduler settings, as its LLM API spells them."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from servesim.schema_base import NonNegativeInt, PositiveInt, Probability, StrictModel


class TrtllmSchedulerConfig(StrictModel):
    """TensorRT-LLM's LLM-API settings (trtllm-serve defaults; docs/modeling/trtllm.md)."""

    backend_name: ClassVar[str] = "trtllm"   # its entry in engine/registry.py

    max_batch_size: PositiveInt = 2048
    max_num_tokens: PositiveInt = 8192
    tokens_per_block: PositiveInt = 32
    max_tokens: PositiveInt | None = None             # KV capacity in tokens; null: from memory
    free_gpu_memory_fraction: Annotated[float, Field(gt=0, le=1)] = 0.9
    max_seq_len: PositiveInt | None = None            # null: the model's context length
    capacity_scheduler_policy: Literal["GUARANTEED_NO_EVICT", "MAX_UTILIZATION"] = "GUARANTEED_NO_EVICT"
    enable_chunked_context: bool = False
    enable_block_reuse: bool = True
    disable_overlap_scheduler: bool | None = None     # null: off, but on (no overlap) with n-gram drafts
    # Batch waiting (PyExecutor._waiting_requests): while requests generate, hold new context
    # work for up to this many iterations, or until it reaches the token ratio of max_num_tokens.
    batch_wait_timeout_iters: NonNegativeInt = 0
    batch_wait_max_tokens_ratio: Annotated[float, Field(ge=0, le=1)] = 0.0

    @model_validator(mode="after")
    def _chunk_holds_a_block(self) -> TrtllmSchedulerConfig:
        if self.enable_chunked_context and self.max_num_tokens < self.tokens_per_block:
            # Context chunks are whole KV blocks (but the last): a smaller budget never fits one.
            raise ValueError(f"max_num_tokens {self.max_num_tokens} is smaller than tokens_per_block "
                             f"{self.tokens_per_block}, so chunked context could never schedule a chunk")
        return self

    @property
    def kv_block_size(self) -> int:
        return self.tokens_per_block

    @property
    def prefix_caching(self) -> bool:
        return self.enable_block_reuse

    @property
    def context_limit(self) -> int:
        return self.max_seq_len

    def output_room(self, input_length: int) -> int:
        return self.max_seq_len - input_length

    @property
    def kv_blocks(self) -> int:
        return self.max_tokens // self.tokens_per_block + 1   # KvCache counts one null block

    @property
    def overlap(self) -> bool:
        return not self.disable_overlap_scheduler
