"""The `cost` block: GPU prices (user-given; servesim invents none) and measured GPU power."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from servesim.schema_base import StrictModel

Price = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Watts = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class GpuPower(StrictModel):
    """A GPU's draw while idle (model loaded, nothing running) and while busy, in watts."""

    idle_w: Watts
    busy_w: Watts

    @model_validator(mode="after")
    def _ordered(self) -> GpuPower:
        if self.idle_w > self.busy_w:
            raise ValueError(f"idle_w ({self.idle_w}) is larger than busy_w ({self.busy_w})")
        return self


class CostConfig(StrictModel):
    # $ per GPU-hour, by GPU name (catalogue names or aliases: `servesim gpus`).
    gpu_price_per_hour: dict[str, Price] = Field(default_factory=dict)
    # Measured power by GPU name; GPUs not named use the catalogue's (hardware/gpus.py).
    gpu_power_w: dict[str, GpuPower] = Field(default_factory=dict)
