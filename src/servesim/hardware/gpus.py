"""Built-in GPUs.

Only what the scheduler defaults need lives here so far: the device memory
vLLM reads to choose its serving defaults (`EngineArgs.get_batch_defaults` in
`vllm/engine/arg_utils.py`, vLLM 0.32), in GiB as the CUDA driver reports it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from servesim.errors import ServesimError


@dataclass(frozen=True, slots=True)
class GpuSpec:
    name: str
    aliases: tuple[str, ...]
    device_name: str
    memory_gib: float  # total device memory as torch.cuda reports it


# Memory: NVIDIA datasheets (A100 80 GB, H100 SXM 80 GB, H200 141 GB, B200 180 GB,
# B300 288 GB, GB200 186 GB, GB300 288 GB per GPU), converted to GiB.
_GPUS = (
    GpuSpec("a100-sxm", ("a100", "a100_sxm", "a100-80gb"), "NVIDIA A100-SXM4-80GB", 79.2),
    GpuSpec("h100-sxm", ("h100", "h100_sxm"), "NVIDIA H100 80GB HBM3", 79.1),
    GpuSpec("h200-sxm", ("h200", "h200_sxm"), "NVIDIA H200", 139.8),
    GpuSpec("b200", ("b200_sxm", "b200-sxm"), "NVIDIA B200", 178.4),
    GpuSpec("b300", ("b300_sxm", "b300-sxm"), "NVIDIA B300 SXM6 AC", 268.2),
    GpuSpec("gb200", ("gb200-nvl72",), "NVIDIA GB200", 184.0),
    GpuSpec("gb300", ("gb300-nvl72",), "NVIDIA GB300", 268.2),
)


def _aliases() -> dict[str, GpuSpec]:
    table = {}
    for gpu in _GPUS:
        for alias in (gpu.name, *gpu.aliases):
            table[alias.lower()] = gpu
    return table


def list_gpus() -> list[GpuSpec]:
    return list(_GPUS)


def resolve_gpu(name: str) -> GpuSpec:
    table = _aliases()
    gpu = table.get(name.lower())
    if gpu is not None:
        return gpu
    close = difflib.get_close_matches(name.lower(), list(table), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known GPUs: {', '.join(g.name for g in _GPUS)}"
    raise ServesimError(f"unknown GPU {name!r}{hint}")
