"""The `router` block: which policy picks a worker of each pool, and its settings.

Defaults are the upstream systems' own (docs/modeling/routing.md names the versions).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from servesim.schema_base import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, StrictModel


class LlmDConfig(StrictModel):
    """router.llm_d: llm-d's endpoint picker, its scorers' weights and settings."""

    prefix_cache_weight: NonNegativeFloat = 3.0        # prefix-cache-scorer
    queue_weight: NonNegativeFloat = 2.0               # queue-scorer
    kv_cache_utilization_weight: NonNegativeFloat = 2.0   # kv-cache-utilization-scorer
    load_aware_weight: NonNegativeFloat = 0.0          # load-aware-scorer (not in the default profile)
    block_size: PositiveInt = 64                       # tokens per prefix block the picker hashes
    max_prefix_blocks_to_match: PositiveInt = 256
    lru_capacity_per_server: PositiveInt = 31250       # blocks the picker remembers per worker
    load_aware_threshold: PositiveInt = 128            # waiting requests at which load-aware scores 0
    # How often the picker scrapes each worker's metrics (waiting queue, KV usage); it routes
    # on the last scrape. 0: it reads them at the instant of routing.
    metrics_interval_ms: NonNegativeFloat = 50.0


class RouterConfig(StrictModel):
    policy: Literal["round_robin", "random", "least_outstanding", "kv_aware", "llm_d"] = "round_robin"
    # kv_aware (Dynamo's KV router) cost per worker: overlap_score_weight × prefill blocks
    # (its queued prefill and this prompt's uncached part) + decode blocks it holds with this
    # request. `overlap_weight` is read as an alias.
    overlap_score_weight: NonNegativeFloat = 1.0
    # Softmax temperature over the normalised costs; 0 picks the lowest cost.
    router_temperature: NonNegativeFloat = 0.0
    # kv_aware: which generation of Dynamo's cost. "0.7": overlap_score_weight × prefill blocks
    # + decode blocks, ties to the lowest index. "1.2": prefill_load_scale × max(raw prefill
    # blocks − overlap_score_credit × decay × cached blocks, 0) + decode blocks, ties drawn.
    dynamo_version: Literal["0.7", "1.2"] = "0.7"
    overlap_score_credit: float = Field(default=1.0, ge=0.0, le=1.0)
    prefill_load_scale: NonNegativeFloat = 1.0
    overlap_score_credit_decay: NonNegativeFloat = 0.0
    # kv_aware: when the router's index hears of a worker's prefix-cache changes. "pass_end":
    # the engine publishes a step's KV events once its pass ends (vLLM 0.32's
    # update_from_output) and they arrive kv_events_delay_ms later; "instant": as they happen;
    # "none": Dynamo's --no-kv-events, the router assumes the prompts it sent a worker stay
    # cached there router_ttl_secs after each send.
    kv_events: Literal["pass_end", "instant", "none"] = "pass_end"
    kv_events_delay_ms: NonNegativeFloat = 0.0
    router_ttl_secs: PositiveFloat = 120.0
    llm_d: LlmDConfig = Field(default_factory=LlmDConfig)
    seed: NonNegativeInt | None = None   # null: derived from the root seed

    @model_validator(mode="before")
    @classmethod
    def _overlap_weight_alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and "overlap_weight" in data:
            if "overlap_score_weight" in data:
                raise ValueError("give overlap_score_weight or its alias overlap_weight, not both")
            data = dict(data)
            data["overlap_score_weight"] = data.pop("overlap_weight")
        return data

    @field_validator("dynamo_version", mode="before")
    @classmethod
    def _version_as_written(cls, value: Any) -> Any:
        # `--set router.dynamo_version=1.2` and YAML's unquoted 1.2 read as numbers.
        return str(value) if isinstance(value, float) else value

    @model_validator(mode="after")
    def _one_generation(self) -> "RouterConfig":
        if self.dynamo_version == "1.2" and self.overlap_score_weight != 1.0:
            raise ValueError("overlap_score_weight is the Dynamo 0.7 router's weight; Dynamo 1.2 reads it as "
                             "prefill_load_scale: set router.prefill_load_scale instead")
        newer = {"overlap_score_credit": 1.0, "prefill_load_scale": 1.0, "overlap_score_credit_decay": 0.0}
        changed = [key for key, default in newer.items() if getattr(self, key) != default]
        if self.dynamo_version == "0.7" and changed:
            raise ValueError(f"router.{changed[0]} belongs to Dynamo 1.2's cost: set router.dynamo_version: "
                             "'1.2' to use it")
        return self

    @property
    def overlap_weight(self) -> float:
        return self.overlap_score_weight
