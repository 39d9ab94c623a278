"""Building a fleet: the workers of each role, their schedulers and step-time models."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from servesim.cluster.engine_choice import EngineChoice, RunEngines
from servesim.config import SimulationConfig
from servesim.config.run_spec import RoleSpec, RunSpec
from servesim.engine.backend import SchedulerSettings
from servesim.engine.kv.cache import KvCache
from servesim.engine.kv.host_tier import HostTier
from servesim.engine.kv.reference_cache import ReferenceKvCache
from servesim.engine.registry import backend_of
from servesim.engine.request import Request
from servesim.engine.speculative import Speculation
from servesim.engine.pipeline import PipelineStages, PipelineWorker
from servesim.engine.worker import Worker
from servesim.errors import ServesimError
from servesim.hardware.deployment import Deployment
from servesim.timing import build_timing_model
from servesim.workload.prompt import BlockKeys, PrefixInterner
from servesim.workload.trace import TraceRequest


# The most GPUs one run may simulate, all roles together: set-up costs about 0.1 ms per worker
# and each worker keeps its own scheduler, cache and timelines, so a larger fleet would take
# minutes and gigabytes before the first request (and is far past any one deployment).
MAX_FLEET_GPUS = 100_000


def fleet_gpus(cfg: SimulationConfig) -> int:
    return sum(r.count * r.tp * r.pp * r.attention_dp for r in cfg.engine.roles().values())


def check_fleet_size(cfg: SimulationConfig) -> None:
    gpus = fleet_gpus(cfg)
    if gpus > MAX_FLEET_GPUS:
        counts = ", ".join(f"{name} {r.count:,} × {r.tp * r.pp * r.attention_dp}"
                           for name, r in cfg.engine.roles().items())
        raise ServesimError(f"engine.workers: the fleet has {gpus:,} GPUs ({counts} per worker), more than the "
                            f"{MAX_FLEET_GPUS:,} servesim simulates in one run; lower count")


@dataclass
class Role:
    name: str                    # "aggregated", "prefill" or "decode"
    spec: RoleSpec
    workers: list[Worker]
    # Worker `index` made afresh (an autoscaled replica brought up later): cluster/autoscaler.py.
    make_worker: Callable[[int], Worker] | None = None

    @property
    def deployment(self) -> Deployment:
        return self.spec.deployment

    @property
    def scheduler_cfg(self) -> SchedulerSettings:
        return self.spec.scheduler

    @property
    def gpus(self) -> int:
        return self.spec.gpus


class RequestFactory:
    """Engine-side requests for one role: block keys at that role's block size, max_model_len clamps."""

    def __init__(self, sched: SchedulerSettings, trace_block_size: int, interner: PrefixInterner) -> None:
        self.sched = sched
        self.backend = backend_of(sched)
        self.trace_block_size = trace_block_size
        self.interner = interner

    def keys(self, trace_request: TraceRequest) -> BlockKeys:
        return BlockKeys(trace_request.request_id, trace_request.content_length or trace_request.input_length,
                         trace_request.hash_ids,
                         self.sched.kv_block_size, self.trace_block_size, self.interner)

    def make(self, trace_request: TraceRequest, arrival_ns: int, engine_arrival_ns: int,
             max_output: int | None = None, keys: BlockKeys | None = None) -> Request:
        sched = self.sched
        if sched.prefix_caching and keys is None:
            keys = self.keys(trace_request)
        elif not sched.prefix_caching:
            keys = None
        wanted = trace_request.output_length if max_output is None else min(max_output, trace_request.output_length)
        max_tokens = min(wanted, max(sched.output_room(trace_request.input_length), 0))
        return Request(trace_request.request_id, arrival_ns, engine_arrival_ns, trace_request.input_length,
                       max_tokens, trace_request.output_length, keys)

    def rejects(self, trace_request: TraceRequest) -> bool:
        return self.reject_reason(trace_request.input_length) is not None

    def reject_reason(self, input_length: int) -> str | None:
        """Why the frontend refuses a prompt of this length (None: it does not)."""
        # Every frontend refuses a prompt that leaves no room for one output token; an engine may
        # refuse more (TensorRT-LLM without chunked context: one longer than a pass's token budget).
        if self.sched.output_room(input_length) < 1:
            return "prompt_exceeds_max_model_len"
        return self.backend.reject_reason(self.sched, input_length)


def make_scheduler(sched, kv, choice: EngineChoice, speculative=None, seed: int = 0):
    """The backend's scheduling policy over the common engine core, in the form `choice` says."""
    scheduler = backend_of(sched).make_scheduler(sched, kv, choice.reference_scheduler)
    if speculative is not None:
        scheduler.speculation = Speculation(speculative, seed)
    return scheduler


def build_roles(spec: RunSpec, engines: RunEngines, finishes_are_quiet: bool, runs_commit_late: bool) -> dict[str, Role]:
    """Each role's workers. `finishes_are_quiet`: a finish changes nothing outside its engine
    before the next arrival; `runs_commit_late`: only arrivals reach a worker between its
    passes, so an async run may commit its follow-up pass late (engine/worker.py)."""
    roles = {}
    for role_name, role in spec.roles.items():
        def make(index: int, role_name=role_name, role=role) -> Worker:
            return make_worker(spec, engines, role_name, role, index, finishes_are_quiet, runs_commit_late)
        roles[role_name] = Role(role_name, role, [make(index) for index in range(role.count)], make)
    return roles


def make_worker(spec: RunSpec, engines: RunEngines, role_name: str, role: RoleSpec, index: int,
                finishes_are_quiet: bool, runs_commit_late: bool) -> Worker:
    """Worker `index` of a role, with its own KV cache, scheduler and step-time model."""
    backend = spec.backend
    sched = role.scheduler
    deployment = role.deployment
    choice = engines.roles[role_name]
    offload = role.kv_offload
    kv = (ReferenceKvCache if choice.exact_cache else KvCache)(
        num_gpu_blocks=sched.kv_blocks,
        block_size=sched.kv_block_size,
        enable_caching=sched.prefix_caching,
        max_model_len=sched.context_limit,
        watermark_blocks=backend.kv_watermark_blocks(sched),
        full_sequence_admission=backend.kv_full_sequence_admission,
    )
    if offload is not None:
        kv.host = host_tier(offload, deployment, sched.kv_block_size)
    scheduler = make_scheduler(sched, kv, choice, role.speculative, spec.seed)
    scheduler.finishes_are_quiet = finishes_are_quiet
    timing = build_timing_model(spec.config.engine.timing, deployment, backend.name, role.speculative, sched)
    late_follow = runs_commit_late and sched.overlap and scheduler.commits_follow_late
    # Under disaggregation a decode worker admits a handoff at its next pass, as with
    # async scheduling off, unless the run asks for vLLM 0.33's later admission.
    commit_at_pass_end = (role_name == "decode" and spec.transfer is not None
                          and spec.transfer.handoff_admission == "next_pass")
    if role.pp > 1:
        worker = PipelineWorker(f"{role_name}-{index}", scheduler, timing, pipeline_stages(role))
    else:
        worker = Worker(f"{role_name}-{index}", scheduler, timing, sched.overlap, late_follow,
                        commit_at_pass_end)
    worker.index = index
    worker.role = role_name
    return worker


def pipeline_stages(role: RoleSpec) -> PipelineStages:
    """The stage boundaries of one of `role`'s workers (pp > 1), over the links its GPUs share."""
    dep = role.deployment
    gpu = dep.gpu
    return PipelineStages(role.pp, dep.gpus, dep.tp, dep.arch.hidden, gpu.nvlink_gb_s, gpu.nvlink_domain,
                          gpu.network_gb_s)


def host_tier(offload, deployment: Deployment, block_size: int) -> HostTier:
    """Host capacity in blocks of this worker's KV (all its GPUs), and one block's copy time.

    Each GPU copies its own shard over its own host link, so a block's copy takes its
    per-GPU bytes over the per-GPU bandwidth.
    """
    block_bytes_per_gpu = deployment.kv_bytes_per_token_per_gpu() * block_size
    capacity = int(offload.host_gb * 1e9 // (block_bytes_per_gpu * deployment.gpus))
    return HostTier(capacity, max(1, round(block_bytes_per_gpu / (offload.bandwidth_gb_s * 1e9) * 1e9)))
