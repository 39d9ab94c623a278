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
    kv_auto = config.kv_cache_dtype == "auto"
    if kv_auto:
        config.kv_cache_dtype = _kv_dtype_for(config.precision)
    check_fleet_size(config)
    deployments = {}
    for role, role_cfg in config.engine.roles().items():
        where = f"engine.workers.{role}.scheduler"
        role_gpu = gpu if role_cfg.gpu is None else _role_gpu(role, role_cfg.gpu)
        if role_cfg.gpu is not None:
            role_cfg.gpu = role_gpu.name
        precision = role_cfg.precision or config.precision
        kv_dtype = _kv_dtype_for(precision) if kv_auto else config.kv_cache_dtype
        role_cfg.gpus_per_node = gpus_per_node(role_cfg.gpus_per_node, role_gpu)
        check_parallelism(f"engine.workers.{role}", model.arch, role_gpu, tp=role_cfg.tp,
                          attention_dp=role_cfg.attention_dp, ep=role_cfg.ep, pp=role_cfg.pp,
                          node_gpus=role_cfg.gpus_per_node)
        if role_cfg.pp != 1 and backend.pp_refusal is not None:
            raise ServesimError(f"engine.workers.{role}.pp: {backend.pp_refusal}; use pp: 1")
        deployment = deployments[role] = Deployment(model.arch, role_gpu, precision, kv_dtype,
                                                    tp=role_cfg.tp, attention_dp=role_cfg.attention_dp,
                                                    ep=role_cfg.ep, pp=role_cfg.pp)
        # The engine's own defaults for every null (engine/<backend>/defaults.py).
        role_cfg.scheduler = backend.resolve_scheduler(role_cfg.scheduler, where, role_gpu, model, deployment,
                                                       role_cfg, role)
    _check_kv_dtypes_match(deployments)
    timing = config.engine.timing
    if isinstance(timing, RooflineTiming) and timing.profile_file is not None:
        # Relative to the config's folder, as traces are; checked (and read) here, before the run,
        # against every role's GPU (a profile is fitted for one GPU and backend).
        profile_file = Path(timing.profile_file).expanduser()
        timing.profile_file = str((profile_file if profile_file.is_absolute() else loaded.base_dir / profile_file)
                                  .resolve())
        from servesim.calibrate.profile_file import load_profile_file

        for gpu_name in sorted({d.gpu.name for d in deployments.values()}):
            load_profile_file(timing.profile_file, gpu_name, backend.timing_profile)
    elif isinstance(timing, RooflineTiming) and timing.profile is None:
        # Record which fitted profile the run uses (config.resolved.yaml shows it), when every
        # role uses the same one; roles on different GPUs find each their own.
        from servesim.timing.roofline import fitted_profile

        keys = {fitted_profile(d.gpu.name, backend.timing_profile)[1] for d in deployments.values()}
        key = keys.pop() if len(keys) == 1 else None
        if key not in (None, "built-in defaults"):
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
        if synthetic.lengths_tokenizer is not None:
            tokenizer = Path(synthetic.lengths_tokenizer).expanduser()
            synthetic.lengths_tokenizer = str((loaded.base_dir / tokenizer).resolve())
    return lower(config, model, gpu, backend, deployments, trace_path, loaded.source, lengths_path)


def _role_gpu(role: str, name: str):
    try:
        return resolve_gpu(name)
    except ServesimError as err:
        raise ServesimError(f"engine.workers.{role}.gpu: {err}") from None


def _kv_dtype_for(precision: str) -> str:
    """kv_cache_dtype auto: fp8 KV with fp8 or fp4 weights, else bf16."""
    return "fp8" if precision in ("fp8", "fp4") else "bf16"


def _check_kv_dtypes_match(deployments: dict[str, Deployment]) -> None:
    prefill, decode = deployments.get("prefill"), deployments.get("decode")
    if prefill is not None and decode is not None and prefill.kv_dtype != decode.kv_dtype:
        raise ServesimError(
            f"engine.workers: prefill keeps its KV cache in {prefill.kv_dtype} and decode in {decode.kv_dtype}; "
            "a KV transfer copies blocks as they are, so give both roles precisions with the same KV dtype "
            "or set kv_cache_dtype")
