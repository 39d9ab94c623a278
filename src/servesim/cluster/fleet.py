"""Building a fleet: the workers of each role, their schedulers and step-time models."""

from __future__ import annotations

from dataclasses import dataclass

from servesim.config import RoleConfig, SimulationConfig, VllmSchedulerConfig
from servesim.engine.fast_vllm import FastVllmScheduler
from servesim.engine.kv_cache import KvCache
from servesim.engine.reference_kv_cache import ReferenceKvCache
from servesim.engine.request import Request
from servesim.engine.vllm_scheduler import VllmScheduler
from servesim.engine.worker import Worker
from servesim.hardware.deployment import Deployment
from servesim.timing import build_timing_model
from servesim.workload.prompt import BlockKeys, PrefixInterner
from servesim.workload.trace import TraceRequest


@dataclass
class Role:
    name: str                    # "aggregated", "prefill" or "decode"
    cfg: RoleConfig
    deployment: Deployment
    workers: list[Worker]

    @property
    def scheduler_cfg(self) -> VllmSchedulerConfig:
        return self.cfg.scheduler

    @property
    def gpus(self) -> int:
        return self.cfg.count * self.cfg.tp * self.cfg.pp * self.cfg.attention_dp


class RequestFactory:
    """Engine-side requests for one role: block keys at that role's block size, max_model_len clamps."""

    def __init__(self, sched: VllmSchedulerConfig, trace_block_size: int, interner: PrefixInterner) -> None:
        self.sched = sched
        self.trace_block_size = trace_block_size
        self.interner = interner

    def keys(self, trace_request: TraceRequest) -> BlockKeys:
        return BlockKeys(trace_request.request_id, trace_request.input_length, trace_request.hash_ids,
                         self.sched.block_size, self.trace_block_size, self.interner)

    def make(self, trace_request: TraceRequest, arrival_ns: int, engine_arrival_ns: int,
             max_output: int | None = None, keys: BlockKeys | None = None) -> Request:
        sched = self.sched
        if sched.enable_prefix_caching and keys is None:
            keys = self.keys(trace_request)
        elif not sched.enable_prefix_caching:
            keys = None
        wanted = trace_request.output_length if max_output is None else min(max_output, trace_request.output_length)
        max_tokens = min(wanted, max(sched.max_model_len - trace_request.input_length, 0))
        return Request(trace_request.request_id, arrival_ns, engine_arrival_ns, trace_request.input_length,
                       max_tokens, trace_request.output_length, keys)

    def rejects(self, trace_request: TraceRequest) -> bool:
        # vLLM's frontend refuses a prompt that leaves no room for one output token.
        return trace_request.input_length >= self.sched.max_model_len


def build_roles(cfg: SimulationConfig, deployments: dict[str, Deployment], sim, on_pass_done,
                use_reference: bool) -> dict[str, Role]:
    roles = {}
    for role_name, role_cfg in cfg.engine.roles().items():
        sched = role_cfg.scheduler
        deployment = deployments[role_name]
        workers = []
        for index in range(role_cfg.count):
            kv = (ReferenceKvCache if use_reference else KvCache)(
                num_gpu_blocks=sched.num_gpu_blocks,
                block_size=sched.block_size,
                enable_caching=sched.enable_prefix_caching,
                max_model_len=sched.max_model_len,
                watermark_blocks=int(sched.watermark * sched.num_gpu_blocks),
            )
            scheduler = (VllmScheduler if use_reference else FastVllmScheduler)(
                kv,
                max_num_seqs=sched.max_num_seqs,
                max_num_batched_tokens=sched.max_num_batched_tokens,
                max_model_len=sched.max_model_len,
                enable_chunked_prefill=sched.enable_chunked_prefill,
                long_prefill_token_threshold=sched.long_prefill_token_threshold,
                async_scheduling=sched.async_scheduling,
            )
            timing = build_timing_model(cfg.engine.timing, deployment, cfg.engine.backend)
            worker = Worker(f"{role_name}-{index}", scheduler, timing, sched.async_scheduling, sim, on_pass_done)
            worker.index = index
            worker.role = role_name
            workers.append(worker)
        roles[role_name] = Role(role_name, role_cfg, deployment, workers)
    return roles
