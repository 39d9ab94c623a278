"""Energy and cost of a run, from its GPUs' power and the user's GPU prices.

Energy: each worker's GPUs draw their idle power for the whole run and, while the worker runs a
pass, the rest of the way up to their busy power, so a worker's mean draw is
idle + (busy − idle) × its busy fraction (linear in it). Busy power defaults to the datasheet
maximum (hardware/gpus.py), which makes the energy an upper bound unless `cost.gpu_power_w`
gives measured values. The window is the benchmark's duration, the span GPU-hours count.

Cost: GPU-hours × the price per GPU-hour, by GPU. Per million tokens, the whole cost is divided
by the output tokens, by the input tokens and by both together (each as if the deployment
produced only them), as serving price sheets quote them; per request by the completed requests.
"""

from __future__ import annotations

from servesim.config.cost import CostConfig
from servesim.errors import ServesimError
from servesim.hardware import GpuSpec, resolve_gpu


def check_cost(cost: CostConfig, gpus: list[GpuSpec]) -> None:
    """Every GPU named resolves, and when prices are given the run's GPUs all have one."""
    for block in ("gpu_price_per_hour", "gpu_power_w"):
        for name in getattr(cost, block):
            try:
                resolve_gpu(name)
            except ServesimError as err:
                raise ServesimError(f"cost.{block}: {err}") from None
    if cost.gpu_price_per_hour:
        priced = {resolve_gpu(name).name for name in cost.gpu_price_per_hour}
        missing = sorted({gpu.name for gpu in gpus} - priced)
        if missing:
            raise ServesimError(f"cost.gpu_price_per_hour has no price for {', '.join(missing)}, which this run "
                                "uses; add it (in $ per GPU-hour)")


def _by_gpu(table: dict, gpu: GpuSpec):
    for name, value in table.items():
        if resolve_gpu(name).name == gpu.name:
            return value
    return None


def power_w(cost: CostConfig, gpu: GpuSpec) -> tuple[float, float]:
    """(idle, busy) watts of one GPU."""
    measured = _by_gpu(cost.gpu_power_w, gpu)
    if measured is not None:
        return measured.idle_w, measured.busy_w
    return gpu.idle_power_w, gpu.max_power_w


def price_per_hour(cost: CostConfig, gpu: GpuSpec) -> float | None:
    return _by_gpu(cost.gpu_price_per_hour, gpu)


def energy_and_cost(cost: CostConfig, workers: list[tuple[GpuSpec, int, float]], summary: dict) -> dict:
    """Summary fields; `workers` holds (GPU, GPUs of the worker, busy fraction) per worker."""
    seconds = summary["duration_ms"] / 1e3
    joules = 0.0
    for gpu, count, busy in workers:
        idle_w, busy_w = power_w(cost, gpu)
        joules += count * seconds * (idle_w + (busy_w - idle_w) * (busy or 0.0))
    output, inputs = summary.get("total_output_tokens") or 0, summary.get("total_input_tokens") or 0
    out: dict = {
        "energy_j": joules,
        "mean_power_w": joules / seconds if seconds else None,
        "energy_per_output_token_j": joules / output if output else None,
    }
    if cost.gpu_price_per_hour:
        dollars = sum(count * seconds / 3600 * price_per_hour(cost, gpu) for gpu, count, _ in workers)
        completed = summary.get("completed") or 0
        out.update({
            "cost_usd": dollars,
            "cost_per_mtok_output_usd": dollars / output * 1e6 if output else None,
            "cost_per_mtok_input_usd": dollars / inputs * 1e6 if inputs else None,
            "cost_per_mtok_total_usd": dollars / (inputs + output) * 1e6 if inputs + output else None,
            "cost_per_request_usd": dollars / completed if completed else None,
        })
    return out
