"""A config's deployment: each role's launch command and the benchmark that measures it.

The plan is built from the run spec the simulation itself runs (config/run_spec.py), so the
commands carry the resolved settings, and from the user's own config, which says which
memory-derived sizes the user pinned (engine/launch.py says why that matters).
"""

from __future__ import annotations

from dataclasses import dataclass

from servesim.config.loading import LoadedConfig
from servesim.config.resolution import resolve
from servesim.config.run_spec import RoleSpec, RunSpec
from servesim.deploy.benchmark import BenchmarkCommand, benchmark_command
from servesim.engine.launch import FrontLaunch, LaunchCommand, RoleAddress, RoleLaunch
from servesim.errors import ServesimError

FRONT_PORT = 8000                     # the port clients (and the benchmark) talk to
ROLE_PORTS = {"aggregated": 8000, "prefill": 8100, "decode": 8200}


@dataclass(frozen=True)
class RolePlan:
    spec: RoleSpec
    launch: RoleLaunch
    command: LaunchCommand


@dataclass(frozen=True)
class DeployPlan:
    run: RunSpec
    model_path: str
    served_model_name: str
    roles: tuple[RolePlan, ...]
    benchmark: BenchmarkCommand
    front: LaunchCommand | None      # the proxy or router clients talk to (None: the role's Service)


def deploy_plan(loaded: LoadedConfig, model_path: str | None = None,
                served_model_name: str | None = None) -> DeployPlan:
    spec = resolve(loaded)
    backend = spec.backend
    if backend.launch is None:
        raise ServesimError(f"servesim deploy has no launch command for {backend.label} yet")
    path = model_path or _catalogue_path(spec)
    name = served_model_name or spec.model.name
    roles = []
    for role_name, role in spec.roles.items():
        launch = _role_launch(loaded, spec, role, path, name)
        roles.append(RolePlan(role, launch, backend.launch(launch)))
    url = f"http://localhost:{FRONT_PORT}"
    front = None if backend.front is None else backend.front(FrontLaunch(
        tuple(RoleAddress(r.spec.name, service_name(name, r.spec.name), r.launch.port, r.spec.count) for r in roles),
        FRONT_PORT, spec.router.policy, spec.engine_version))
    benchmark = benchmark_command(spec.config, url, name, path, spec.trace_path, spec.lengths_path)
    return DeployPlan(spec, path, name, tuple(roles), benchmark, front)


def service_name(served_model_name: str, role: str) -> str:
    """A role's Kubernetes Service (and the host the front sends its requests to)."""
    prefix = served_model_name.lower().replace(".", "-").replace("_", "-").replace("/", "-")
    return f"{prefix}-{role}"


def _catalogue_path(spec: RunSpec) -> str:
    if not spec.model.hf_ids:
        raise ServesimError(f"model {spec.model.name} has no Hugging Face id in the catalogue; give "
                            "--model-path (a Hugging Face id or a folder on the servers)")
    return spec.model.hf_ids[0]


def _role_launch(loaded: LoadedConfig, spec: RunSpec, role: RoleSpec, model_path: str, name: str) -> RoleLaunch:
    user_role = loaded.config.engine.roles()[role.name]
    resolved_role = spec.config.engine.roles()[role.name]
    sched = role.scheduler
    pinned = frozenset(user_role.scheduler.model_fields_set) if user_role.scheduler is not None else frozenset()
    deployment = role.deployment
    return RoleLaunch(
        role=role.name, engine_version=spec.engine_version, model_path=model_path, served_model_name=name,
        port=ROLE_PORTS[role.name] if spec.disaggregated else FRONT_PORT,
        tp=role.tp, pp=role.pp, ep=role.ep, attention_dp=role.attention_dp,
        gpus_per_host=role.deployment.gpu.gpus_per_host,
        gpu_memory_utilization=resolved_role.gpu_memory_utilization, scheduler=sched, pinned=pinned,
        speculative=role.speculative, kv_offload=role.kv_offload, precision=deployment.precision,
        checkpoint_precision=deployment.arch.native_dtype, kv_cache_dtype=loaded.config.kv_cache_dtype,
        disaggregated=spec.disaggregated,
        predicted_kv_tokens=(sched.kv_blocks - 1) * sched.kv_block_size,
    )
