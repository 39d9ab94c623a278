"""`engine.workers.<role>.autoscaling`: replicas added and removed from observed load, as a
Kubernetes HorizontalPodAutoscaler scales a Deployment (docs/fleets.md, "Autoscaling")."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Discriminator, Tag, model_validator

from servesim.errors import ServesimError
from servesim.schema_base import NonNegativeFloat, PositiveFloat, PositiveInt, StrictModel


class AutoscalingConfig(StrictModel):
    # The per-replica metric, averaged over the ready replicas at each sync, as vLLM's /metrics
    # gauges give it: requests waiting (vllm:num_requests_waiting), requests in the engine
    # (running + waiting) or the KV cache's used fraction (vllm:kv_cache_usage_perc).
    metric: Literal["queue_length", "in_flight", "kv_utilization"]
    target: PositiveFloat                       # the metric's target average value per replica
    min_replicas: PositiveInt = 1
    max_replicas: PositiveInt
    # The HPA's defaults: --horizontal-pod-autoscaler-sync-period 15 s, --horizontal-pod-
    # autoscaler-tolerance 0.1, behavior.scaleDown.stabilizationWindowSeconds 300.
    sync_period_s: PositiveFloat = 15.0
    tolerance: NonNegativeFloat = 0.1
    scale_down_stabilization_s: NonNegativeFloat = 300.0
    # A new replica is ready after each GPU has loaded its weights at this rate, plus the
    # engine's start-up (process start, memory profiling, CUDA graph capture).
    load_bandwidth_gb_s: PositiveFloat = 5.0
    startup_s: NonNegativeFloat = 30.0

    @model_validator(mode="before")
    @classmethod
    def _named_policy(cls, value):
        # `policy: hpa` names the default policy; the block is the same without it.
        if isinstance(value, dict) and value.get("policy") == "hpa":
            value = {k: v for k, v in value.items() if k != "policy"}
        return value

    @model_validator(mode="after")
    def _bounds(self) -> AutoscalingConfig:
        if self.max_replicas < self.min_replicas:
            raise ValueError(f"max_replicas ({self.max_replicas}) must be at least min_replicas "
                             f"({self.min_replicas})")
        return self


class PlannerConfig(StrictModel):
    """`policy: sla_planner`: Dynamo's SLA planner (cluster/planner.py; docs/modeling/autoscaling.md)."""

    policy: Literal["sla_planner"]
    # Dynamo's SLAPlannerDefaults: adjustment_interval 180 s, ttft 0.5 s, itl 0.05 s,
    # min_endpoint 1. Its default predictor is ARIMA; servesim has the constant one (what
    # ARIMA returns too until it has 5 observations).
    adjustment_interval_s: PositiveFloat = 180.0
    ttft_s: PositiveFloat = 0.5
    itl_s: PositiveFloat = 0.05
    load_predictor: Literal["constant"] = "constant"
    # Scale the prefill load by min(1, observed TTFT / profiled) and the ITL target by
    # profiled ITL / observed each interval (Dynamo's default; its --no-correction: false).
    correction: bool = True
    min_replicas: PositiveInt = 1
    max_replicas: PositiveInt
    load_bandwidth_gb_s: PositiveFloat = 5.0
    startup_s: NonNegativeFloat = 30.0

    @property
    def sync_period_s(self) -> float:
        return self.adjustment_interval_s

    @model_validator(mode="after")
    def _bounds(self) -> PlannerConfig:
        return AutoscalingConfig._bounds(self)


def _policy_of(value) -> str:
    # Tags in capitals: config/errors.py leaves them out of an error's dotted path.
    policy = value.get("policy") if isinstance(value, dict) else getattr(value, "policy", None)
    return "HPA" if policy in (None, "hpa") else "Planner"


# An HPA block (no `policy`, or `policy: hpa`) or the planner's: what `engine.workers.<role>.autoscaling` takes.
AutoscalingBlock = Annotated[Union[Annotated[AutoscalingConfig, Tag("HPA")],
                                   Annotated[PlannerConfig, Tag("Planner")]], Discriminator(_policy_of)]


def check_autoscaling(role: str, role_cfg, source_of) -> None:
    """One sentence when a role's autoscaling cannot run as given."""
    cfg = role_cfg.autoscaling
    if cfg is None:
        return
    where = f"engine.workers.{role}"   # aggregated, or a prefill or decode pool: each scales alone
    if not cfg.min_replicas <= role_cfg.count <= cfg.max_replicas:
        raise ServesimError(f"{source_of(where + '.count')}: {where}.count ({role_cfg.count}) is the replicas "
                            f"at start and must lie within autoscaling's min_replicas ({cfg.min_replicas}) and "
                            f"max_replicas ({cfg.max_replicas})")
