"""Which roofline parameters a set of result files can constrain, and whether the set is consistent.

A parameter is fitted only where the files vary what it scales with: the per-token terms
(GEMM and attention efficiency) need runs at two or more prompt lengths, the per-pass and
per-layer overheads two or more concurrencies (or request rates); memory efficiency needs a
TPOT; the collective latency needs a deployment with collectives (tp × attention_dp > 1); the
expert terms a model with routed experts. The others keep their shipped values and are named.
"""

from __future__ import annotations

from servesim.errors import ServesimError
from servesim.calibrate.search import PARAMS
from servesim.validate.measured import MeasuredRun

DISTINCT = 0.10   # two prompt lengths (or loads) differ when they are 10% apart


def _distinct(values: list[float]) -> int:
    kept: list[float] = []
    for value in sorted(values):
        if not kept or value > kept[-1] * (1 + DISTINCT):
            kept.append(value)
    return len(kept)


def _load(run: MeasuredRun) -> float | None:
    if run.max_concurrency is not None:
        return float(run.max_concurrency)
    return None if run.request_rate in (None, "inf") else float(run.request_rate)


def unconstrained_reasons(runs: list[MeasuredRun], config) -> dict[str, str]:
    """{parameter: why these files cannot constrain it} (absent: it can be fitted)."""
    lengths = [r.mean_input_length for r in runs if r.mean_input_length]
    if any(r.input_lens for r in runs):
        lengths = [sum(r.input_lens) / len(r.input_lens) for r in runs if r.input_lens] + lengths
    loads = [x for x in (_load(r) for r in runs) if x is not None]
    why: dict[str, str] = {}
    if _distinct(lengths) < 2:
        for name in ("gemm_efficiency", "attention_efficiency"):
            why[name] = "needs runs at two or more prompt lengths"
    if _distinct(loads) < 2:
        for name in ("pass_overhead_ms", "per_layer_overhead_us"):
            why[name] = "needs runs at two or more concurrencies or request rates"
    role = next(iter(config.engine.roles().values()))
    if role.tp * role.attention_dp == 1:
        why["comm_latency_us"] = "the deployment has no collectives (one GPU per worker)"
    from servesim.models import resolve_model

    if resolve_model(config.model).arch.moe_layers == 0:
        why["expert_efficiency"] = why["eager_moe_layer_us"] = "the model has no routed experts"
    if not any(r.figure("tpot", "mean") for r in runs):
        why["memory_efficiency"] = "needs a mean TPOT"
    return why


def check_consistent(runs: list[MeasuredRun], config=None) -> None:
    """Refuse files of different models or engines (one profile cannot describe both), or of another
    engine than the config's (the profile is keyed by the config's backend)."""
    from servesim.models import resolve_model

    def model_name(name: str) -> str:
        try:
            return resolve_model(name).name
        except ServesimError:
            return name

    models = {model_name(r.model) for r in runs if r.model}
    if len(models) > 1:
        raise ServesimError(f"the result files were measured on different models ({', '.join(sorted(models))}); "
                            "calibrate one model's files at a time")
    engines = {r.engine for r in runs if r.engine}
    if len(engines) > 1:
        raise ServesimError(f"the result files were measured on different engines ({', '.join(sorted(engines))}); "
                            "calibrate one engine's files at a time")
    if config is not None and engines and engines != {config.engine.backend}:
        raise ServesimError(f"the result files were measured on engine {engines.pop()} but --config simulates "
                            f"{config.engine.backend}; calibrate against a config of the engine measured")
    for run in runs:
        if not run.figure("ttft", "mean") or not run.figure("tpot", "mean"):
            raise ServesimError(f"{run.label} reports no mean TTFT and TPOT, which calibrate fits")


def free_parameters(runs: list[MeasuredRun], config, asked: list[str] | None) -> tuple[list[str], dict[str, str]]:
    """(parameters to fit, {unconstrained parameter: why}); refuses when nothing or a named one cannot be."""
    why = unconstrained_reasons(runs, config)
    if asked:
        for name in asked:
            if name not in PARAMS:
                raise ServesimError(f"--params: {name!r} is not a roofline parameter calibrate fits "
                                    f"({', '.join(PARAMS)})")
            if name in why:
                raise ServesimError(f"--params: these files cannot constrain {name}: it {why[name]}")
        return list(asked), {p: why.get(p, "not in --params") for p in PARAMS if p not in asked}
    free = [p for p in PARAMS if p not in why]
    if not free:
        raise ServesimError("these files cannot constrain any roofline parameter: "
                            + "; ".join(f"{p} {w}" for p, w in why.items()))
    return free, why
