"""Step times from aiconfigurator-core's measured kernel database (optional extra `servesim[aic]`)."""

from __future__ import annotations

from servesim.errors import ServesimError
from servesim.timing.base import PassShape, TimingModel


class AicTimingModel(TimingModel):
    def __init__(self, cfg, deployment, backend: str) -> None:
        try:
            import aiconfigurator  # noqa: F401
        except ImportError:
            raise ServesimError(
                "engine.timing.kind aic needs aiconfigurator-core: install it with pip install 'servesim[aic]'"
            ) from None
        raise ServesimError("engine.timing.kind aic is not wired up yet; use roofline")

    def duration_ns(self, shape: PassShape) -> int:  # pragma: no cover - never constructed
        raise NotImplementedError
