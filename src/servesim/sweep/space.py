"""The sweep's space file: which config paths vary and over what, the search, the constraints,
the objective and the SLOs. Parsed strictly (pydantic, strict types, unknown keys rejected);
every error is one sentence naming the field. See docs/sweeps.md.

A parameter is a dotted config path (a `*` segment stands for every key present there,
e.g. every worker role) mapped to
- a list of values, any YAML (a mapping replaces the whole subtree at the path), or
- `{min, max, step}` (an arithmetic range, both ends included), or
- `{min, max, factor}` (a geometric range: min, min·factor, ... up to max), or
- `{min, max}` / `{min, max, log: true}`: a distribution, for random search only.
Integers stay integers when min, max and step (or factor) are all integers.
"""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import Field, ValidationError, field_validator, model_validator

from servesim.config import StrictModel, error_sentence
from servesim.yaml_io import load_yaml, read_text
from servesim.errors import ServesimError

Number = Union[int, float]
# A sweep runs every listed combination: bound them before anything is enumerated, so a
# typo like step 1 over 10**12 is a clear error instead of an endless expansion.
MAX_VALUES_PER_PARAMETER = 10_000
MAX_CANDIDATES = 100_000
_SEGMENT = re.compile(r"^(?:\*|[A-Za-z_][A-Za-z0-9_]*)$")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class Span(StrictModel):
    """A numeric range (`step` or `factor`) or distribution (neither) between min and max."""

    min: Number
    max: Number
    step: Annotated[Number, Field(gt=0)] | None = None
    factor: Annotated[Number, Field(gt=1)] | None = None
    log: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> Span:
        if not (math.isfinite(self.min) and math.isfinite(self.max)):
            raise ValueError("min and max must be finite numbers")
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max})")
        if self.step is not None and self.factor is not None:
            raise ValueError("give step (an arithmetic range) or factor (a geometric one), not both")
        if self.log and (self.step is not None or self.factor is not None):
            raise ValueError("log applies to a distribution {min, max, log}; a range with step or factor "
                             "already lists its values")
        if (self.log or self.factor is not None) and self.min <= 0:
            raise ValueError("a log distribution or a geometric range needs min > 0")
        count = self.count()
        if count is not None and count > MAX_VALUES_PER_PARAMETER:
            raise ValueError(f"the range lists {count:,.0f} values; servesim's limit is "
                             f"{MAX_VALUES_PER_PARAMETER:,} per parameter")
        return self

    def count(self) -> float | None:
        """How many values the range lists (a float: it may be astronomically large), None for a distribution."""
        if self.step is not None:
            steps = (self.max - self.min) / self.step
        elif self.factor is not None:
            steps = math.log(self.max / self.min) / math.log(self.factor)
        else:
            return None
        return math.floor(steps + 1e-9) + 1 if math.isfinite(steps) else math.inf

    @property
    def integer(self) -> bool:
        given = [v for v in (self.min, self.max, self.step, self.factor) if v is not None]
        return all(_is_int(v) for v in given)

    def values(self) -> list[Number] | None:
        """The range's values, or None for a distribution."""
        out: list[Number] = []
        if self.step is not None:
            count = int(math.floor((self.max - self.min) / self.step + 1e-9)) + 1
            out = [self.min + i * self.step for i in range(count)]
            if not self.integer:
                out = [round(v, 12) for v in out]
        elif self.factor is not None:
            value = self.min
            while value <= self.max * (1 + 1e-12):
                out.append(value)
                value = value * self.factor
            if not self.integer:
                out = [round(v, 12) for v in out]
        else:
            return None
        return out

    def sample(self, rng: random.Random) -> Number:
        listed = self.values()
        if listed is not None:
            return listed[rng.randrange(len(listed))]
        u = rng.random()
        if self.log:
            value = math.exp(math.log(self.min) + u * (math.log(self.max) - math.log(self.min)))
        else:
            value = self.min + u * (self.max - self.min)
        if self.integer:
            return min(max(int(round(value)), self.min), self.max)
        return value


Parameter = Union[Annotated[list[Any], Field(min_length=1)], Span]


class Halving(StrictModel):
    """Successive halving: every candidate on the first `min_requests` requests, the best
    1/eta of them on eta times as many, and so on up to the whole workload."""

    min_requests: Annotated[int, Field(gt=0)]
    eta: Annotated[int, Field(ge=2)] = 3


class Search(StrictModel):
    method: Literal["grid", "random"] = "grid"
    samples: Annotated[int, Field(gt=0)] | None = None    # random search: how many candidates
    seed: Annotated[int, Field(ge=0)] = 0
    halving: Halving | None = None

    @model_validator(mode="after")
    def _samples(self) -> Search:
        if self.method == "random" and self.samples is None:
            raise ValueError("random search needs samples: how many candidates to draw")
        if self.method == "grid" and self.samples is not None:
            raise ValueError("samples applies to random search; grid search runs every combination")
        return self


class Constraints(StrictModel):
    max_gpus: Annotated[int, Field(gt=0)] | None = None       # total GPUs of a candidate
    gpus_per_node: Annotated[int, Field(gt=0)] | None = None  # one worker (tp × pp × attention_dp) fits in a node


class GoodputPerGpu(StrictModel):
    """Requests per second that meet every SLO, per GPU."""

    kind: Literal["goodput_per_gpu"]


class ThroughputPerGpu(StrictModel):
    """Output tokens per second per GPU (set the TPOT target under `slo`)."""

    kind: Literal["throughput_per_gpu"]


class MinGpus(StrictModel):
    """The fewest GPUs that meet the SLOs (ties: goodput per GPU), optionally at a Poisson request rate."""

    kind: Literal["min_gpus"]
    request_rate: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None


class CostPerMtok(StrictModel):
    """The lowest cost per million output tokens (needs cost.gpu_price_per_hour in the base config)."""

    kind: Literal["cost_per_mtok"]


class GoodputPerDollar(StrictModel):
    """Requests that meet every SLO per dollar spent on GPUs (needs cost.gpu_price_per_hour)."""

    kind: Literal["goodput_per_dollar"]


COST_OBJECTIVES = ("cost_per_mtok", "goodput_per_dollar")
Objective = Annotated[Union[GoodputPerGpu, ThroughputPerGpu, MinGpus, CostPerMtok, GoodputPerDollar],
                      Field(discriminator="kind")]


class SweepSlo(StrictModel):
    """A candidate meets the SLOs when the given percentile of each metric set is within it."""

    ttft_ms: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    tpot_ms: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    e2e_ms: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    percentile: Literal[50, 90, 99] = 90


class SweepSpace(StrictModel):
    parameters: dict[str, Parameter]
    search: Search = Field(default_factory=Search)
    constraints: Constraints = Field(default_factory=Constraints)
    objective: Objective = Field(default_factory=lambda: GoodputPerGpu(kind="goodput_per_gpu"))
    # null: the base config's `slo` (its defaults when it has none), at percentile 90.
    slo: SweepSlo | None = None

    @field_validator("parameters")
    @classmethod
    def _paths(cls, parameters: dict[str, Any]) -> dict[str, Any]:
        if not parameters:
            raise ValueError("name at least one parameter to vary")
        for path in parameters:
            if not all(_SEGMENT.match(part) for part in path.split(".")):
                raise ValueError(f"{path!r} is not a dotted config path like engine.workers.aggregated.tp "
                                 "(a whole segment may be *)")
        return parameters

    @model_validator(mode="after")
    def _grid_needs_lists(self) -> SweepSpace:
        if self.search.method == "grid":
            for path, param in self.parameters.items():
                if isinstance(param, Span) and param.values() is None:
                    raise ValueError(f"parameters.{path} is a distribution {{min, max}}, which grid search cannot "
                                     "list; give step or factor, a list, or use search.method: random")
        if self.search.method == "grid":
            combinations = math.prod(len(parameter_values(p)) for p in self.parameters.values())
            if combinations > MAX_CANDIDATES:
                raise ValueError(f"the grid has {combinations:,} combinations; servesim's limit is "
                                 f"{MAX_CANDIDATES:,} (use search.method: random with samples)")
        elif self.search.samples > MAX_CANDIDATES:
            raise ValueError(f"search.samples is {self.search.samples:,}; servesim's limit is {MAX_CANDIDATES:,}")
        if self.search.halving is not None:
            for path in self.parameters:
                if path.startswith("workload"):
                    raise ValueError(f"parameters.{path}: successive halving shortens the workload itself; "
                                     "vary workload fields without halving")
        return self

    def canonical(self) -> str:
        """The space as canonical JSON: equal spaces, equal strings (used to match a resumed sweep)."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def parse_space(data: Any, source: str = "space") -> SweepSpace:
    if not isinstance(data, dict):
        raise ServesimError(f"{source}: the space must be a mapping with a `parameters` key")
    try:
        return SweepSpace.model_validate(data)
    except ValidationError as err:
        raise ServesimError(error_sentence(err, data, source)) from None


def load_space(path: Path) -> SweepSpace:
    return parse_space(load_yaml(read_text(path, "space file"), str(path)), str(path))


def parameter_values(param: Parameter) -> list[Any] | None:
    """A parameter's listed values (None for a distribution)."""
    return param if isinstance(param, list) else param.values()
