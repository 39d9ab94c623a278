"""The timing boundary: a pass's shape in, its duration in nanoseconds out.

A timing model sees only what the GPU would compute: each prefill chunk with
the prefix already computed before it, and the decoding requests in aggregate
(how many, their total context). Durations are rounded to whole nanoseconds
once, here, and are at least 1 ns so time always moves forward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from servesim.config import AicTiming, FixedTiming, PolynomialTiming, RooflineTiming, TimingConfig
from servesim.engine.registry import DEFAULT_BACKEND, get_backend


@dataclass(slots=True)
class PassShape:
    # (tokens in the chunk, tokens already computed before it) per prefill chunk
    prefill_chunks: list[tuple[int, int]] = field(default_factory=list)
    num_decodes: int = 0
    decode_tokens: int = 0          # tokens computed by decoding requests (1 each without drafts)
    decode_context: int = 0         # Σ over decoding requests of the context their new tokens attend to

    @classmethod
    def of(cls, decided) -> PassShape:
        """The shape of a scheduled pass: its explicit entries plus its decode group, if any."""
        shape = cls(num_decodes=decided.group_size, decode_tokens=decided.group_size,
                    decode_context=decided.group_context)
        for e in decided.entries:
            if e.is_decode:
                shape.num_decodes += 1
                shape.decode_tokens += e.tokens
                shape.decode_context += e.computed_before + e.tokens
            else:
                shape.prefill_chunks.append((e.tokens, e.computed_before))
        return shape


class TimingModel:
    def duration_ns(self, shape: PassShape) -> int:
        raise NotImplementedError

    def fixed_ns(self) -> int | None:
        """Every pass's duration, when it depends on nothing (else None): the engine then builds
        no shape (a loop over the pass's entries) to price a pass."""
        return None

    def min_pass_ns(self) -> int:
        """A lower bound on any pass's duration (0: none known). Lets a decode worker see past a
        prefill pass that hands nothing over: the next one cannot end sooner than this after it."""
        return 0

    def uniform_decode_ns(self) -> int | None:
        """The duration of every pass that only decodes, when it depends on nothing (else None):
        a fast-forwarded run then needs no per-pass durations at all."""
        return None

    def decode_steps_ns(self, num_decodes: int, context: int, count: int) -> np.ndarray:
        """Durations of `count` passes in a row that only decode `num_decodes` requests, whose
        total context is `context` in the first and grows by `num_decodes` per pass.

        Must equal `duration_ns` of each such pass exactly; models override it to vectorise.
        """
        out = np.empty(count, dtype=np.int64)
        for i in range(count):
            shape = PassShape(num_decodes=num_decodes, decode_tokens=num_decodes,
                              decode_context=context + i * num_decodes)
            out[i] = self.duration_ns(shape)
        return out

    def decode_steps_list(self, num_decodes: int, context: int, count: int) -> list[int]:
        """decode_steps_ns as a list of ints (what a fast-forwarded run keeps); models whose
        short runs are cheaper priced without numpy override it."""
        return self.decode_steps_ns(num_decodes, context, count).tolist()


class FixedTimingModel(TimingModel):
    def __init__(self, cfg: FixedTiming) -> None:
        self._ns = max(1, round(cfg.pass_ms * 1e6))

    def duration_ns(self, shape: PassShape) -> int:
        return self._ns

    def fixed_ns(self) -> int | None:
        return self._ns

    def min_pass_ns(self) -> int:
        return self._ns

    def uniform_decode_ns(self) -> int:
        return self._ns

    def decode_steps_ns(self, num_decodes: int, context: int, count: int) -> np.ndarray:
        return np.full(count, self._ns, dtype=np.int64)


class PolynomialTimingModel(TimingModel):
    """base + a·prefill tokens + b·decode tokens + c·context tokens + d·requests.

    Context tokens are the tokens each request's attention reads: for a chunk,
    its prefix plus itself; summed over the pass's requests.
    """

    def __init__(self, cfg: PolynomialTiming) -> None:
        self._base = cfg.base_ms * 1e6
        self._prefill = cfg.per_prefill_token_ms * 1e6
        self._decode = cfg.per_decode_token_ms * 1e6
        self._context = cfg.per_context_token_ms * 1e6
        self._request = cfg.per_request_ms * 1e6

    def duration_ns(self, shape: PassShape) -> int:
        prefill_tokens = 0
        context = shape.decode_context
        for tokens, prefix in shape.prefill_chunks:
            prefill_tokens += tokens
            context += prefix + tokens
        requests = len(shape.prefill_chunks) + shape.num_decodes
        ns = (self._base + self._prefill * prefill_tokens + self._decode * shape.decode_tokens
              + self._context * context + self._request * requests)
        return max(1, round(ns))

    def min_pass_ns(self) -> int:
        # Every term but the base is non-negative; rounding never takes a pass below floor(base).
        return max(1, math.floor(self._base))

    def decode_steps_ns(self, num_decodes: int, context: int, count: int) -> np.ndarray:
        # The same float operations, in the same order, as duration_ns: bit-identical results.
        contexts = (context + num_decodes * np.arange(count, dtype=np.int64)).astype(np.float64)
        ns = (self._base + self._prefill * 0 + self._decode * num_decodes
              + self._context * contexts + self._request * num_decodes)
        return np.maximum(1, np.round(ns)).astype(np.int64)


def build_timing_model(cfg: TimingConfig, deployment=None, backend: str = DEFAULT_BACKEND,
                       speculative=None, sched=None) -> TimingModel:
    """The step-time model of `cfg`; `backend` (engine.backend) picks the fitted profiles and tables."""
    engine = get_backend(backend)
    if isinstance(cfg, FixedTiming):
        return FixedTimingModel(cfg)
    if isinstance(cfg, PolynomialTiming):
        return PolynomialTimingModel(cfg)
    if isinstance(cfg, RooflineTiming):
        from servesim.timing.roofline import (RooflineTimingModel, fitted_profile, named_profile,
                                              profile_with_overrides)

        if cfg.profile_file is not None:
            from servesim.calibrate.profile_file import load_profile_file

            profile = load_profile_file(cfg.profile_file, deployment.gpu.name, engine.timing_profile)
        elif cfg.profile is not None:
            profile = named_profile(cfg.profile if "/" in cfg.profile else engine.profile_key(cfg.profile))
        else:
            profile, _ = fitted_profile(deployment.gpu.name, engine.timing_profile)
        return RooflineTimingModel(deployment, profile_with_overrides(profile, cfg), speculative,
                                   graph_tokens=None if sched is None else engine.prefill_graph_tokens(sched))
    if isinstance(cfg, AicTiming):
        from servesim.timing.aic import AicTimingModel

        return AicTimingModel(cfg, deployment, engine)
    raise AssertionError(cfg)
