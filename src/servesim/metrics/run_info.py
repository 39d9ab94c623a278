"""summary.json's `simulated`: what ran, in the words of the config a user would write."""

from __future__ import annotations

from typing import Any

from servesim.cluster.engine_choice import RunEngines
from servesim.engine.registry import get_backend


def timing_profile(config, gpu: str) -> str | None:
    """The step-time fit actually used: a roofline profile's key, or None for other timing kinds."""
    timing = config.engine.timing
    if timing.kind != "roofline":
        return None
    if getattr(timing, "profile_file", None) is not None:
        return f"profile_file {timing.profile_file}"
    if timing.profile is not None:
        return timing.profile if "/" in timing.profile else get_backend(config.engine.backend).profile_key(timing.profile)
    return "built-in defaults"   # resolve() records every fitted profile it finds in timing.profile


def describe(config, gpu: str, engines: RunEngines, model_id: str) -> dict[str, Any]:
    backend = get_backend(config.engine.backend)
    return {
        "model": config.model,
        "model_id": model_id,   # its Hugging Face id, when the catalogue knows one
        "gpu": gpu,
        "backend": backend.name,
        "engine_version": config.engine.version,   # engine.version, resolved
        "engine_version_followed": f"{backend.label} {config.engine.version}",
        "roles": {name: {"count": role.count, "tp": role.tp, "ep": role.ep, "attention_dp": role.attention_dp,
                         "pp": role.pp, "gpus": role.count * role.tp * role.pp * role.attention_dp,
                         "speculative": role.speculative is not None, "kv_offload": role.kv_offload is not None,
                         "engine": engines.roles[name].path, **_own_hardware(role)}
                  for name, role in config.engine.roles().items()},
        "timing": {**config.engine.timing.model_dump(mode="json"), "profile_used": timing_profile(config, gpu)},
        "client": config.workload.client.model_dump(mode="json"),
        "slo": config.slo.model_dump(mode="json"),
        "engine": engines.path,
        "engine_reason": engines.reason,
    }


def _own_hardware(role) -> dict[str, str]:
    """A role's own gpu and precision, where it has them (null: the run's top-level ones)."""
    return {key: value for key, value in (("gpu", role.gpu), ("precision", role.precision)) if value is not None}
