"""Step-time models: the duration of one pass from what it computes."""

from servesim.timing.base import PassShape, TimingModel, build_timing_model

__all__ = ["PassShape", "TimingModel", "build_timing_model"]
