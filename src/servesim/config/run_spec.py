"""The run spec: the validated config lowered once, every value the engine needs set and typed.

`resolve()` (config/resolution.py) fills every `null` that stands for an engine default in a
copy of the user's config, then lowers it here into a frozen `RunSpec` that the fleet, the
loop, the engines and the reports read. The user schema keeps its `None`s ("the engine's
default", "the catalogue's value"); the spec has none where the engine needs a number.

`RunSpec.config` is that resolved copy: `config.resolved.yaml` is dumped from it, and is a
valid input that reproduces the run (`tests/test_run_spec.py`).

Converted so far: the per-role settings (RoleSpec), the KV transfer (TransferSpec, its
bandwidth and latency in the units the loop uses), the router (RouterSpec, its seed
derived), and the run-wide values (seed, the request path, warm-up, the backend's
`Backend` object). Still the resolved pydantic objects, held as they are: each role's
scheduler settings (the backend's schema, every field set by the backend's resolver: see
`_check_scheduler`), speculative decoding and KV offload (None: the feature is off), the
timing model's block (its nulls mean "the fitted profile's value", which timing/ looks up),
the workload, the client and the SLO.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from servesim.config.schema import (KvOffloadConfig, KvTransferConfig, RoleConfig, RouterConfig, SimulationConfig,
                                    SpeculativeConfig)
from servesim.engine.backend import Backend, SchedulerSettings
from servesim.engine.request_path import RequestPath, request_path_for
from servesim.hardware import GpuSpec
from servesim.hardware.deployment import Deployment
from servesim.models import ModelSpec


@dataclass(frozen=True)
class RoleSpec:
    """One role of the fleet ("aggregated", "prefill" or "decode"), every value resolved."""

    name: str
    count: int
    tp: int
    pp: int
    ep: int
    attention_dp: int
    gpus_per_node: int
    scheduler: SchedulerSettings            # the backend's resolved scheduler settings
    deployment: Deployment
    speculative: SpeculativeConfig | None   # None: no speculative decoding
    kv_offload: KvOffloadConfig | None      # None: no host-memory tier
    autoscaling: Any = None                 # config/autoscaling.py's AutoscalingConfig; None: `count` fixed

    @property
    def gpus(self) -> int:
        return self.count * self.tp * self.pp * self.attention_dp


@dataclass(frozen=True)
class TransferSpec:
    """Prefill → decode KV transfers (disaggregated serving), in the loop's units."""

    bytes_per_s: float          # all the TP ranks' links together
    latency_ns: int
    first_token_from: str       # "prefill" or "decode" (docs/modeling/disaggregation.md)
    kv_bytes_per_token: float   # the prefill side's KV bytes per prompt token
    handoff_admission: str = "next_pass"   # or "after_committed" (vLLM 0.33 under async scheduling)


@dataclass(frozen=True)
class RouterSpec:
    policy: str
    overlap_weight: float       # router.overlap_score_weight (kv_aware)
    seed: int                   # router.seed, or the root seed when it is null
    temperature: float = 0.0    # router.router_temperature (kv_aware)
    llm_d: Any = None           # router.llm_d (config/router_config.py LlmDConfig)
    kv_events: str = "pass_end"  # router.kv_events (kv_aware): "pass_end", "instant" or "none"
    kv_events_delay_ns: int = 0  # router.kv_events_delay_ms, in ns
    dynamo_version: str = "0.7"  # router.dynamo_version (kv_aware): which generation of Dynamo's cost
    overlap_score_credit: float = 1.0         # the 1.2 cost's keys
    prefill_load_scale: float = 1.0
    overlap_score_credit_decay: float = 0.0
    router_ttl_ns: int = 120_000_000_000   # router.router_ttl_secs (kv_events: none), in ns


@dataclass(frozen=True)
class RunSpec:
    config: SimulationConfig        # the resolved config (config.resolved.yaml, Result.config)
    model: ModelSpec
    gpu: GpuSpec
    backend: Backend
    engine_version: str
    seed: int
    request_path: RequestPath       # the API server's time around the engine (engine/request_path.py)
    warmup_requests: int
    reference: bool                 # engine.reference
    roles: Mapping[str, RoleSpec]   # in fleet order
    router: RouterSpec
    transfer: TransferSpec | None   # set exactly when prefill and decode are split
    trace_path: Path | None
    source: str
    lengths_path: Path | None = None   # workload.synthetic.lengths_from, resolved

    @property
    def disaggregated(self) -> bool:
        return self.transfer is not None

    @property
    def deployments(self) -> dict[str, Deployment]:
        return {name: role.deployment for name, role in self.roles.items()}

    @property
    def gpus(self) -> int:
        return sum(role.gpus for role in self.roles.values())


def lower(config: SimulationConfig, model: ModelSpec, gpu: GpuSpec, backend: Backend,
          deployments: dict[str, Deployment], trace_path: Path | None, source: str,
          lengths_path: Path | None) -> RunSpec:
    """The spec of a resolved config (every engine default already filled in)."""
    engine = config.engine
    roles = {name: _role(name, role_cfg, deployments[name]) for name, role_cfg in engine.roles().items()}
    transfer = _transfer(engine.kv_transfer, deployments) if engine.disaggregated else None
    router = RouterSpec(config.router.policy, config.router.overlap_score_weight,
                        _router_seed(config.router, config.seed), config.router.router_temperature,
                        config.router.llm_d, config.router.kv_events,
                        round(config.router.kv_events_delay_ms * 1_000_000), config.router.dynamo_version,
                        config.router.overlap_score_credit, config.router.prefill_load_scale,
                        config.router.overlap_score_credit_decay, round(config.router.router_ttl_secs * 1_000_000_000))
    return RunSpec(config, model, gpu, backend, engine.version, config.seed, _request_path(config, model, backend),
                   config.workload.warmup_requests, engine.reference, MappingProxyType(roles), router, transfer,
                   trace_path, source, lengths_path)


def _role(name: str, cfg: RoleConfig, deployment: Deployment) -> RoleSpec:
    _check_scheduler(cfg.scheduler, f"engine.workers.{name}.scheduler")
    if cfg.gpus_per_node is None:
        raise AssertionError(f"engine.workers.{name}.gpus_per_node was not resolved (a servesim bug)")
    return RoleSpec(name, cfg.count, cfg.tp, cfg.pp, cfg.ep, cfg.attention_dp, cfg.gpus_per_node, cfg.scheduler,
                    deployment, cfg.speculative, cfg.kv_offload, cfg.autoscaling)


def _check_scheduler(sched: Any, where: str) -> None:
    """Every setting of a resolved scheduler is a value: a backend's resolver fills each null."""
    missing = [key for key, value in sched.model_dump().items() if value is None]
    if missing:
        raise AssertionError(f"{where}: {', '.join(missing)} left null by the backend's resolver (a servesim bug)")


def _transfer(cfg: KvTransferConfig, deployments: dict[str, Deployment]) -> TransferSpec:
    prefill, decode = deployments["prefill"], deployments["decode"]
    per_gpu_gb_s = cfg.bandwidth_gb_s or min(prefill.gpu.network_gb_s, decode.gpu.network_gb_s)
    # Each TP rank sends its own shard over its own NIC: the links work in parallel.
    return TransferSpec(per_gpu_gb_s * 1e9 * min(prefill.gpus, decode.gpus), round(cfg.latency_ms * 1e6),
                        cfg.first_token_from, prefill.arch.kv_bytes_per_token(prefill.kv_bytes),
                        cfg.handoff_admission)


def _request_path(config: SimulationConfig, model: ModelSpec, backend: Backend) -> RequestPath:
    """The run's request path: the costs of the role that first takes a request (the prefill
    pool under disaggregation), the decode pool's for the proxy's hop, the model's tokenizer."""
    engine = config.engine
    roles = engine.roles()
    first = roles.get("prefill") or roles.get("aggregated") or next(iter(roles.values()))
    decode = roles.get("decode")
    return request_path_for(engine.request_path, backend.request_path, engine.timing.kind,
                            first.tp * first.attention_dp, model.tokenizer, engine.tokenization_ms,
                            decode_tp=None if decode is None else decode.tp * decode.attention_dp,
                            sequential_handoff=backend.pd_proxy_sequential)


def _router_seed(cfg: RouterConfig, root_seed: int) -> int:
    return root_seed if cfg.seed is None else cfg.seed
