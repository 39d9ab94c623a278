"""The configuration schema: what a user may write, validated strictly.

Every model forbids unknown keys and coerces nothing (`strict=True`): `1` is not
a boolean, `"5"` is not a number. Field meanings, units and defaults are
documented in docs/config.md. Each engine's scheduler schema lives in its package
(engine/<backend>/config.py) and is reached through engine/registry.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_serializer, model_validator

from servesim.config.autoscaling import AutoscalingBlock
from servesim.config.cost import CostConfig
from servesim.config.sessions import PrefixRepetition, SessionsConfig, check_prefix_repetition, check_sessions_client
from servesim.config.router_config import RouterConfig  # noqa: F401 (re-exported)
from servesim.engine.registry import BACKENDS, DEFAULT_BACKEND
from servesim.serve.settings import ServeConfig
from servesim.schema_base import (
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Probability,
    StrictModel,
)

# --------------------------------------------------------------------------- timing


class FixedTiming(StrictModel):
    kind: Literal["fixed"]
    pass_ms: PositiveFloat = 10.0


class PolynomialTiming(StrictModel):
    """pass time = base + a·prefill tokens + b·decode tokens + c·context tokens + d·requests.

    The defaults are representative of Llama-3.1-8B in bf16 on one H100-SXM
    under vLLM (see docs/config.md for where they come from).
    """

    kind: Literal["polynomial"]
    base_ms: NonNegativeFloat = 6.5
    per_prefill_token_ms: NonNegativeFloat = 0.04
    per_decode_token_ms: NonNegativeFloat = 0.02
    per_context_token_ms: NonNegativeFloat = 4.0e-5
    per_request_ms: NonNegativeFloat = 0.0


class RooflineTiming(StrictModel):
    """Hardware-grounded pass times from the model and GPU catalogues (timing/roofline.py).

    Efficiencies and overheads default to the values fitted for the GPU and backend
    (src/servesim/timing/data/roofline_fit.json); any of them can be pinned here.
    """

    kind: Literal["roofline"]
    # Which fitted profile to use, as "<gpu>/<backend>"; null = this deployment's own.
    profile: str | None = None
    # Or a profile `servesim calibrate` wrote (calibrate/profile_file.py); not with `profile`.
    profile_file: str | None = None
    gemm_efficiency: Annotated[float, Field(gt=0, le=1)] | None = None
    gemm_half_tokens: PositiveFloat | None = None
    memory_efficiency: Annotated[float, Field(gt=0, le=1)] | None = None
    attention_efficiency: Annotated[float, Field(gt=0, le=1)] | None = None
    comm_efficiency: Annotated[float, Field(gt=0, le=1)] | None = None
    comm_latency_us: NonNegativeFloat | None = None
    pass_overhead_ms: NonNegativeFloat | None = None
    per_layer_overhead_us: NonNegativeFloat | None = None
    per_request_ms: NonNegativeFloat | None = None
    expert_efficiency: Annotated[float, Field(gt=0, le=1)] | None = None
    eager_moe_layer_us: NonNegativeFloat | None = None

    @model_validator(mode="after")
    def _one_profile(self) -> RooflineTiming:
        if self.profile is not None and self.profile_file is not None:
            raise ValueError("give profile (a shipped fit) or profile_file (a calibrated one), not both")
        return self

    @model_serializer(mode="wrap")
    def _without_unset_file(self, handler):
        # Left out when unset, so configs without one dump (and hash) as they always have.
        data = handler(self)
        if isinstance(data, dict) and data.get("profile_file") is None:
            data.pop("profile_file", None)
        return data


class AicTiming(StrictModel):
    """Pass times from aiconfigurator-core's measured kernel database (optional extra servesim[aic]).

    `version` is the backend version whose kernel tables to use (as aiconfigurator-core serves
    them: a version or its alias current / previous / next); null takes its current one.
    """

    kind: Literal["aic"]
    version: str | None = None


TimingConfig = Annotated[Union[FixedTiming, PolynomialTiming, RooflineTiming, AicTiming],
                         Field(discriminator="kind")]


# --------------------------------------------------------------------------- schedulers

# engine.backend's values and every role's scheduler type, in the registry's order.
BackendName = Literal[tuple(BACKENDS)]
SchedulerConfig = Union[tuple(backend.schema for backend in BACKENDS.values())]

# The validation-context key under which `load_config` collects what is wrong with each role's
# scheduler (role name -> SchedulerFault), to word it, naming the file or --set behind it, only
# once everything else has validated: a scheduler's keys mean something only under a valid
# engine.backend, and an error elsewhere is reported first.
SCHEDULER_FAULTS = "scheduler_faults"


@dataclass
class SchedulerFault:
    """What is wrong with one role's scheduler mapping: not a mapping, a key another backend
    owns (`key`, its `owner`'s label), or its backend schema's `error`."""

    where: str                        # engine.workers.<role>.scheduler
    data: Any
    key: str | None = None
    owner: str | None = None
    error: ValidationError | None = None


def _validate_scheduler(backend, where: str, data: Any) -> Any:
    """`data` validated as `backend`'s scheduler, or the SchedulerFault saying why it is not one."""
    if not isinstance(data, dict):
        return SchedulerFault(where, data)
    for key in data:
        owners = [b for b in BACKENDS.values() if key in b.schema.model_fields]
        if key not in backend.schema.model_fields and owners:
            return SchedulerFault(where, data, key=key, owner=owners[0].label)
    try:
        return backend.schema.model_validate(data)
    except ValidationError as err:
        return SchedulerFault(where, data, error=err)


# --------------------------------------------------------------------------- workers


class SpeculativeConfig(StrictModel):
    """Drafts verified per decoding pass; `acceptance_rate` is a constant per-draft rate a
    (position i accepted with probability a^i) or per-position rates p_1 >= ... >= p_k."""

    method: Literal["ngram", "eagle", "mtp"]
    num_speculative_tokens: PositiveInt
    acceptance_rate: Probability | list[Probability]

    @model_validator(mode="after")
    def _per_position_length(self) -> SpeculativeConfig:
        rates = self.acceptance_rate
        if isinstance(rates, list) and len(rates) != self.num_speculative_tokens:
            raise ValueError(
                f"acceptance_rate lists {len(rates)} per-position rates but "
                f"num_speculative_tokens is {self.num_speculative_tokens}"
            )
        if isinstance(rates, list) and any(later > earlier for earlier, later in zip(rates, rates[1:])):
            raise ValueError(
                "acceptance_rate per-position rates must not increase: position i is accepted only "
                "if every earlier position is, so its rate is at most the previous one's"
            )
        return self


class KvOffloadConfig(StrictModel):
    """A host-memory tier under the prefix cache (vLLM CPU offloading, SGLang HiCache)."""

    host_gb: PositiveFloat            # host memory for this worker's offloaded KV, GB (1e9 bytes)
    bandwidth_gb_s: PositiveFloat     # host-to-GPU copy bandwidth per GPU, GB/s (PCIe 5.0 x16: ~55)


class RoleConfig(StrictModel):
    count: PositiveInt = 1
    tp: PositiveInt = 1              # tensor parallelism
    pp: PositiveInt = 1              # pipeline parallelism (vLLM; SGLang and TensorRT-LLM: only 1)
    attention_dp: PositiveInt = 1    # data-parallel attention ranks (each its own KV cache and batch)
    ep: PositiveInt = 1              # expert parallelism, over the worker's tp × attention_dp GPUs
    # The most GPUs one worker (tp × attention_dp × pp) may span; null: the GPU's NVLink domain
    # in the catalogue (8 on HGX boards, 72 on NVL72 racks). Larger: the worker spans nodes.
    gpus_per_node: PositiveInt | None = None
    # This role's GPU and weight precision; null: the top-level gpu and precision. Prefill and
    # decode on different GPUs exchange KV over the network both have (docs/fleets.md).
    gpu: str | None = None
    precision: Literal["bf16", "fp8", "fp4", "int4"] | None = None
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.9
    # engine.backend's schema, chosen by EngineConfig (the backend is a sibling of this
    # model's parent, which a field validator cannot see); null: that schema's defaults.
    scheduler: SchedulerConfig | None = None
    speculative: SpeculativeConfig | None = None
    kv_offload: KvOffloadConfig | None = None
    autoscaling: AutoscalingBlock | None = None   # config/autoscaling.py; count: the replicas at start

    @model_serializer(mode="wrap")
    def _omit_absent_autoscaling(self, handler):
        # Written only when given: fixed fleets dump (and hash) as before.
        data = handler(self)
        if self.autoscaling is None and isinstance(data, dict):
            data.pop("autoscaling", None)
        return data


class WorkersConfig(StrictModel):
    """Either `aggregated` workers, or `prefill` and `decode` pools joined by KV transfers."""

    aggregated: RoleConfig | None = None
    prefill: RoleConfig | None = None
    decode: RoleConfig | None = None

    @model_validator(mode="after")
    def _shape(self) -> WorkersConfig:
        split = (self.prefill is not None, self.decode is not None)
        if split == (False, False):
            if self.aggregated is None:
                self.aggregated = RoleConfig()
        elif split != (True, True):
            raise ValueError("prefill/decode disaggregation needs both engine.workers.prefill and "
                             "engine.workers.decode")
        elif self.aggregated is not None:
            raise ValueError("give engine.workers.aggregated, or prefill and decode, not both")
        return self


class KvTransferConfig(StrictModel):
    """How a prefill worker's KV cache reaches a decode worker (disaggregated serving)."""

    # null: the GPU catalogue's scale-out network bandwidth per GPU (the NIC), in GB/s (bytes).
    bandwidth_gb_s: PositiveFloat | None = None
    latency_ms: NonNegativeFloat = 0.0
    # When the client sees the first token: only once the decode worker has it after the
    # transfer (vLLM's and SGLang's P/D serving paths, docs/modeling/disaggregation.md), or
    # as soon as the prefill worker produces it.
    first_token_from: Literal["prefill", "decode"] = "decode"
    # When a decode worker under async scheduling admits a handoff: at its next pass, as with
    # async scheduling off (servesim's scheduling contract), or in the first pass it commits
    # after the handoff lands, one pass later while a pass is committed (vLLM 0.33 itself).
    handoff_admission: Literal["next_pass", "after_committed"] = "next_pass"


class RequestPathConfig(StrictModel):
    """engine.request_path: the API server's costs around the passes (docs/modeling/request_path.md)."""

    # null: on with the roofline and aic step times, off with fixed and polynomial ones (their
    # runs are hand-checked and count every nanosecond themselves).
    enabled: bool | None = None
    # Each null takes the engine's own cost (engine/<backend>/backend.py).
    http_ms: NonNegativeFloat | None = None
    to_engine_ms: NonNegativeFloat | None = None
    broadcast_ms: NonNegativeFloat | None = None
    output_ms: NonNegativeFloat | None = None
    # null: the model's tokenizer family's cost (engine/request_path.py).
    tokenizer_us_per_token: NonNegativeFloat | None = None


class EngineConfig(StrictModel):
    backend: BackendName = DEFAULT_BACKEND
    # The upstream version of the backend to follow; null: the newest it models (engine/registry.py).
    version: str | None = None

    @field_validator("version", mode="before")
    @classmethod
    def _version_is_text(cls, value: Any) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            # YAML reads 0.32 as a number (and 0.30 as 0.3): say how to write it.
            raise ValueError(f"a version is text: quote it, as in version: \"{value}\" "
                             "(unquoted, YAML reads it as a number and drops trailing zeros)")
        return value
    # A fixed tokenization time in place of the request path's per-token one (kept from before
    # the request path existed; with the path off it is the only frontend cost).
    tokenization_ms: NonNegativeFloat | None = None
    request_path: RequestPathConfig = Field(default_factory=RequestPathConfig)
    timing: TimingConfig = Field(default_factory=lambda: RooflineTiming(kind="roofline"))
    workers: WorkersConfig = Field(default_factory=WorkersConfig)
    kv_transfer: KvTransferConfig = Field(default_factory=KvTransferConfig)
    # Debugging aid: run the straightforward per-request scheduler instead of the fast one.
    reference: bool = False

    @model_validator(mode="before")
    @classmethod
    def _schedulers_by_backend(cls, data: Any, info: ValidationInfo) -> Any:
        """engine.backend is the discriminator of every role's scheduler: each mapping is
        validated against that backend's schema (engine/registry.py) before its role is.

        Under `load_config` (its context holds SCHEDULER_FAULTS) a faulty scheduler is set
        aside for it to report; otherwise the fault is raised here, as a value error on engine.
        """
        if not isinstance(data, dict) or not isinstance(data.get("workers"), dict):
            return data
        backend = data.get("backend", DEFAULT_BACKEND)
        backend = BACKENDS.get(backend) if isinstance(backend, str) else None
        faults = (info.context or {}).get(SCHEDULER_FAULTS)
        data = dict(data)
        workers = data["workers"] = dict(data["workers"])
        for role, role_cfg in workers.items():
            if not isinstance(role_cfg, dict) or "scheduler" not in role_cfg:
                continue
            role_cfg = workers[role] = dict(role_cfg)
            raw = role_cfg.pop("scheduler")
            if backend is None:
                continue   # engine.backend's own error is the one to report
            where = f"engine.workers.{role}.scheduler"
            checked = _validate_scheduler(backend, where, {} if raw is None else raw)
            if not isinstance(checked, SchedulerFault):
                role_cfg["scheduler"] = checked
            elif faults is not None:
                faults.setdefault(role, checked)
            else:
                from servesim.config.errors import scheduler_fault_sentence

                raise ValueError(scheduler_fault_sentence(checked, backend))
        return data

    @model_validator(mode="after")
    def _default_schedulers(self) -> EngineConfig:
        schema = BACKENDS[self.backend].schema
        for role_cfg in self.roles().values():
            if role_cfg.scheduler is None:
                role_cfg.scheduler = schema.model_validate({})
        return self

    def roles(self) -> dict[str, RoleConfig]:
        workers = self.workers
        if workers.aggregated is not None:
            return {"aggregated": workers.aggregated}
        return {"prefill": workers.prefill, "decode": workers.decode}

    @property
    def disaggregated(self) -> bool:
        return self.workers.aggregated is None


# --------------------------------------------------------------------------- workload


class LengthRange(StrictModel):
    min: PositiveInt
    max: PositiveInt

    @model_validator(mode="after")
    def _ordered(self) -> LengthRange:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max})")
        return self


Length = Union[PositiveInt, LengthRange]
SessionsConfig.model_rebuild(_types_namespace={"Length": Length, "LengthRange": LengthRange})


class SyntheticConfig(StrictModel):
    num_requests: PositiveInt
    input_length: Length | None = None
    output_length: Length | None = None
    # Or draw (input, output) pairs with replacement from a trace's requests.
    lengths_from: str | None = None
    lengths_format: Literal["mooncake", "azure", "vidur", "servesim-jsonl", "sharegpt"] | None = None
    lengths_tokenizer: str | None = None   # a tokenizer.json counting ShareGPT text (workload/sharegpt.py)
    seed: NonNegativeInt | None = None
    # The same first prefix_length tokens in every prompt, before its input_length tokens
    # (vLLM's --random-prefix-len); the prefix cache can share them.
    prefix_length: NonNegativeInt = 0
    prefix_repetition: PrefixRepetition | None = None   # config/sessions.py

    @model_validator(mode="after")
    def _lengths(self) -> SyntheticConfig:
        if self.prefix_repetition is not None:
            check_prefix_repetition(self)
            return self
        given = (self.input_length is not None, self.output_length is not None)
        if self.lengths_from is None and given != (True, True):
            raise ValueError("give input_length and output_length, or lengths_from")
        if self.lengths_from is not None and any(given):
            raise ValueError("lengths_from replaces input_length and output_length; give one or the other")
        if self.lengths_tokenizer is not None and self.lengths_from is None:
            raise ValueError("lengths_tokenizer counts the text of a ShareGPT lengths_from file; give lengths_from")
        return self

    @model_serializer(mode="wrap")
    def _omit_absent_repetition(self, handler):
        # Written only when given: synthetic configs without it dump (and hash) as before.
        data = handler(self)
        if isinstance(data, dict):
            for key in ("prefix_repetition", "lengths_tokenizer"):
                if getattr(self, key) is None:
                    data.pop(key, None)
        return data


class OpenLoopClient(StrictModel):
    mode: Literal["open_loop"]
    time_scale: PositiveFloat = 1.0


class PoissonClient(StrictModel):
    mode: Literal["poisson"]
    rate: PositiveFloat


class ClosedLoopClient(StrictModel):
    mode: Literal["closed_loop"]
    concurrency: PositiveInt


Rate = Union[PositiveFloat, Literal["inf"]]   # "inf" (or YAML .inf) as vLLM's float("inf")


class BenchClient(StrictModel):
    """`vllm bench serve`'s traffic (vLLM 0.32 vllm/benchmarks/serve.py; workload/clients.py)."""

    mode: Literal["bench"]
    request_rate: Rate = "inf"                # requests/s; inf: all at time 0 (vLLM's default)
    burstiness: Rate = 1.0                    # gamma shape of the gaps; 1: Poisson; inf: even gaps
    max_concurrency: PositiveInt | None = None   # a semaphore in front of the server; null: none
    ramp_up_strategy: Literal["linear", "exponential"] | None = None
    ramp_up_start_rps: PositiveInt | None = None   # integers, as vLLM's --ramp-up-*-rps
    ramp_up_end_rps: PositiveInt | None = None

    @model_validator(mode="before")
    @classmethod
    def _spell_inf(cls, data: Any) -> Any:
        # Kept as the string "inf": JSON (summary, config hash) has no infinity.
        if isinstance(data, dict):
            data = {k: "inf" if k in ("request_rate", "burstiness") and v == float("inf")
                    and not isinstance(v, bool) else v for k, v in data.items()}
        return data

    @model_validator(mode="after")
    def _ramp_up(self) -> BenchClient:
        # vLLM 0.32 main_async's checks, in its words where they apply.
        ends = (self.ramp_up_start_rps, self.ramp_up_end_rps)
        if self.ramp_up_strategy is None:
            if ends != (None, None):
                raise ValueError("ramp_up_start_rps and ramp_up_end_rps need ramp_up_strategy "
                                 "(linear or exponential)")
            return self
        if None in ends:
            raise ValueError("ramp_up_strategy needs both ramp_up_start_rps and ramp_up_end_rps")
        if self.request_rate != "inf":
            raise ValueError("with ramp_up_strategy the rate follows the ramp-up; leave request_rate "
                             "unset (inf), as vLLM requires")
        if ends[0] > ends[1]:
            raise ValueError(f"ramp_up_start_rps ({ends[0]}) must not exceed ramp_up_end_rps ({ends[1]})")
        return self


ClientConfig = Annotated[Union[OpenLoopClient, PoissonClient, ClosedLoopClient, BenchClient],
                         Field(discriminator="mode")]
TRACE_FORMATS = ("mooncake", "azure", "vidur", "servesim-jsonl")


class WorkloadConfig(StrictModel):
    trace: str | None = None
    synthetic: SyntheticConfig | None = None
    sessions: SessionsConfig | None = None   # config/sessions.py
    format: Literal["mooncake", "azure", "vidur", "servesim-jsonl", "mooncake-sessions",
                    "agentic-mooncake", "weka-trace"] | None = None
    trace_block_size: PositiveInt = 512
    max_requests: PositiveInt | None = None
    # Requests 0 .. warmup_requests-1 run but are left out of the summary's metrics.
    warmup_requests: NonNegativeInt = 0
    client: ClientConfig = Field(default_factory=lambda: OpenLoopClient(mode="open_loop"))

    @model_validator(mode="after")
    def _one_source(self) -> WorkloadConfig:
        if sum(source is not None for source in (self.trace, self.synthetic, self.sessions)) != 1:
            raise ValueError("give exactly one of workload.trace, workload.synthetic and workload.sessions")
        if self.sessions is not None:
            check_sessions_client(self.sessions, self.client, self.max_requests, self.warmup_requests)
        return self

    @model_serializer(mode="wrap")
    def _omit_absent_sessions(self, handler):
        # Written only when given: configs without sessions dump (and hash) as before.
        data = handler(self)
        if self.sessions is None and isinstance(data, dict):
            data.pop("sessions", None)
        return data


class SloConfig(StrictModel):
    ttft_ms: PositiveFloat | None = 2000.0
    tpot_ms: PositiveFloat | None = 50.0
    e2e_ms: PositiveFloat | None = None


class SimulationConfig(StrictModel):
    model: str = "llama-3.1-8b"
    gpu: str = "h100-sxm"
    # Weights and GEMMs; null = the checkpoint's own (bf16 for most, fp8 for DeepSeek-V3/R1).
    # int4 is weight-only (GEMMs in bf16).
    precision: Literal["bf16", "fp8", "fp4", "int4"] | None = None
    kv_cache_dtype: Literal["auto", "bf16", "fp8"] = "auto"
    seed: NonNegativeInt = 0
    engine: EngineConfig = Field(default_factory=EngineConfig)
    router: RouterConfig = Field(default_factory=RouterConfig)
    workload: WorkloadConfig
    slo: SloConfig = Field(default_factory=SloConfig)
    cost: CostConfig = Field(default_factory=CostConfig)
    serve: ServeConfig | None = Field(default=None, exclude=True)   # servesim serve only (docs/serve.md)

    @model_serializer(mode="wrap")
    def _omit_empty_cost(self, handler):
        # Written only when given: configs without prices or power dump (and hash) as before.
        data = handler(self)
        if isinstance(data, dict) and not (self.cost.gpu_price_per_hour or self.cost.gpu_power_w):
            data.pop("cost", None)
        return data
