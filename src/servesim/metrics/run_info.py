"""summary.json's `simulated`: what ran, in the words of the config a user would write."""

from __future__ import annotations

from typing import Any

from servesim.engine.registry import get_backend


def engine_choice(config) -> tuple[str, str]:
    """Which engine ran ("fast" or "reference") and why. A pass log or per-request token times
    do not change it: the fast engine names every request of its passes when asked."""
    if config.engine.reference:
        return "reference", "engine.reference is true"
    if any(role.kv_offload is not None for role in config.engine.roles().values()):
        return "reference", "KV offload runs the exact KV cache (cluster/fleet.py: host-tier keys must be exact)"
    if any(role.speculative is not None for role in config.engine.roles().values()):
        return "reference", "speculative decoding runs the per-request engine (no lockstep decode group)"
    return "fast", "the default (the reference engine gives the same results, more slowly)"


def timing_profile(config, gpu: str) -> str | None:
    """The step-time fit actually used: a roofline profile's key, or None for other timing kinds."""
    timing = config.engine.timing
    if timing.kind != "roofline":
        return None
    if timing.profile is not None:
        return timing.profile if "/" in timing.profile else get_backend(config.engine.backend).profile_key(timing.profile)
    return "built-in defaults"   # resolve() records every fitted profile it finds in timing.profile


def describe(config, gpu: str, engine: tuple[str, str], model_id: str) -> dict[str, Any]:
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
                         "speculative": role.speculative is not None, "kv_offload": role.kv_offload is not None}
                  for name, role in config.engine.roles().items()},
        "timing": {**config.engine.timing.model_dump(mode="json"), "profile_used": timing_profile(config, gpu)},
        "client": config.workload.client.model_dump(mode="json"),
        "slo": config.slo.model_dump(mode="json"),
        "engine": engine[0],
        "engine_reason": engine[1],
    }
