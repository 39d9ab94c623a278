"""SGLang's scheduler settings, as `sglang.launch_server` spells them."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from servesim.schema_base import NonNegativeInt, PositiveInt, Probability, StrictModel


class SglangSchedulerConfig(StrictModel):
    """SGLang's server arguments (sglang 0.5.9 defaults; docs/modeling/sglang.md)."""

    backend_name: ClassVar[str] = "sglang"   # its entry in engine/registry.py

    max_running_requests: PositiveInt | None = None   # null: SGLang's rule from the KV pool size
    chunked_prefill_size: int | None = None           # null: by GPU memory (8192 on H100/H200); -1: off
    max_prefill_tokens: PositiveInt = 16384
    max_total_tokens: PositiveInt | None = None       # KV pool in tokens; null: from mem_fraction_static
    mem_fraction_static: Annotated[float, Field(gt=0, le=1)] | None = None  # null: SGLang's rule
    page_size: PositiveInt = 1
    context_length: PositiveInt | None = None         # null: the model's
    schedule_policy: Literal["fcfs", "lpm"] = "fcfs"
    # null: the radix cache is on, except on P/D decode workers, where SGLang forces a plain
    # chunk cache (0.5.9 always; later versions unless --disaggregation-decode-enable-radix-cache);
    # false here turns it on there.
    disable_radix_cache: bool | None = None
    disable_overlap_schedule: bool | None = None      # null: off, but on (no overlap) with speculative decoding
    enable_mixed_chunk: bool = False
    init_new_token_ratio: Probability = 0.7
    min_new_token_ratio: Probability = 0.098          # 0.7 × SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR 0.14
    new_token_ratio_decay: Probability = 0.0010033    # (0.7 − 0.098) / 600 decode passes
    # P/D decode workers: decode tokens kept free per admitted request before a KV transfer may
    # take pages (the SGLANG_NUM_RESERVED_DECODE_TOKENS environment variable).
    num_reserved_decode_tokens: NonNegativeInt = 512
    # --scheduler-recv-interval: the scheduler reads new requests only every this many loop
    # iterations (a decode pass counts 1, a prefill pass reads at the next one; 1: every one).
    scheduler_recv_interval: PositiveInt = 1

    @model_validator(mode="after")
    def _chunk_in_whole_pages(self) -> SglangSchedulerConfig:
        chunk = self.chunked_prefill_size
        if chunk is not None and chunk != -1 and chunk < 1:
            raise ValueError(f"chunked_prefill_size must be a positive number of tokens, or -1 to turn "
                             f"chunking off (got {chunk})")
        if chunk is not None and chunk > 0 and chunk % self.page_size:
            # SGLang asserts this too: a chunk is cut to whole pages, so a smaller one never progresses.
            raise ValueError(f"chunked_prefill_size {chunk} must be a multiple of page_size {self.page_size}")
        return self

    @property
    def kv_block_size(self) -> int:
        return self.page_size

    @property
    def prefix_caching(self) -> bool:
        return not self.disable_radix_cache

    @property
    def context_limit(self) -> int:
        return self.context_length

    def output_room(self, input_length: int) -> int:
        # SGLang clamps max_new_tokens to context_length - input - 1 (Scheduler.init_req_max_new_tokens).
        return self.context_length - input_length - 1

    @property
    def kv_blocks(self) -> int:
        return self.max_total_tokens // self.page_size + 1   # KvCache counts one null block

    @property
    def overlap(self) -> bool:
        return not self.disable_overlap_schedule
