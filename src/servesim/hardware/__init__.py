"""GPU catalogue."""

from servesim.hardware.gpus import GpuSpec, list_gpus, resolve_gpu

__all__ = ["GpuSpec", "list_gpus", "resolve_gpu"]
