"""Fill every `null` that stands for an engine default, so the resolved config says what ran,
and lower the result into the run spec everything downstream reads (config/run_spec.py)."""

from __future__ import annotations

from pathlib import Path

from servesim.config import LoadedConfig, RooflineTiming
from servesim.config.run_spec import RunSpec, lower
from servesim.cluster.fleet import check_fleet_size
from servesim.engine.registry import get_backend
from servesim.errors import ServesimError
from servesim.hardware import resolve_gpu
from servesim.hardware.deployment import Deployment
from servesim.hardware.parallelism import check_parallelism, gpus_per_node
from servesim.models import resolve_model


# The name resolve()'s result had before it was the run spec.
ResolvedRun = RunSpec


def resolve(loaded: LoadedConfig) -> RunSpec:
    config = loaded.config.model_copy(deep=True)
    model = resolve_model(config.model, loaded.base_dir)
    gpu = resolve_gpu(config.gpu)
    config.model = model.name if not model.name.endswith(".json") else str(Path(model.name).resolve())
    config.gpu = gpu.name
    backend = get_backend(config.engine.backend)
    config.engine.version = config.engine.version or backend.newest_version
    native = model.arch.native_dtype if model.arch.native_dtype in ("bf16", "fp8") else "bf16"
    config.precision = config.precision or native
    if config.kv_cache_dtype == "auto":
        config.kv_cache_dtype = "fp8" if config.precision in ("fp8", "fp4") else "bf16"
    check_fleet_size(config)
    deployments = {}
    for role, role_cfg in config.engine.roles().items():
        where = f"engine.workers.{role}.scheduler"
        role_cfg.gpus_per_node = gpus_per_node(role_cfg.gpus_per_node, gpu)
        check_parallelism(f"engine.workers.{role}", model.arch, gpu, tp=role_cfg.tp, attention_dp=role_cfg.attention_dp,
                          ep=role_cfg.ep, pp=role_cfg.pp, node_gpus=role_cfg.gpus_per_node)
        if role_cfg.pp != 1:
            raise ServesimError(f"engine.workers.{role}.pp: pipeline parallelism is not modelled yet; use pp: 1")
        deployment = deployments[role] = Deployment(model.arch, gpu, config.precision, config.kv_cache_dtype,
                                                    tp=role_cfg.tp, attention_dp=role_cfg.attention_dp,
                                                    ep=role_cfg.ep)
        # The engine's own defaults for every null (engine/<backend>/defaults.py).
        role_cfg.scheduler = backend.resolve_scheduler(role_cfg.scheduler, where, gpu, model, deployment,
                                                       role_cfg, role)
    timing = config.engine.timing
    if isinstance(timing, RooflineTiming) and timing.profile_file is not None:
        # Relative to the config's folder, as traces are; checked (and read) here, before the run.
        profile_file = Path(timing.profile_file).expanduser()
        timing.profile_file = str((profile_file if profile_file.is_absolute() else loaded.base_dir / profile_file)
                                  .resolve())
        from servesim.calibrate.profile_file import load_profile_file

        load_profile_file(timing.profile_file, gpu.name, backend.timing_profile)
    elif isinstance(timing, RooflineTiming) and timing.profile is None:
        # Record which fitted profile the run uses (config.resolved.yaml shows it).
        from servesim.timing.roofline import fitted_profile

        _, key = fitted_profile(gpu.name, backend.timing_profile)
        if key != "built-in defaults":
            timing.profile = key
    trace_path = loaded.trace_path()
    if trace_path is not None:
        trace_path = trace_path.resolve()
        config.workload.trace = str(trace_path)
    lengths_path = None
    synthetic = config.workload.synthetic
    if synthetic is not None and synthetic.lengths_from is not None:
        lengths_path = Path(synthetic.lengths_from).expanduser()
        if not lengths_path.is_absolute():
            lengths_path = loaded.base_dir / lengths_path
        lengths_path = lengths_path.resolve()
        synthetic.lengths_from = str(lengths_path)
    return lower(config, model, gpu, backend, deployments, trace_path, loaded.source, lengths_path)
