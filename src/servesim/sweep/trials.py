"""From a space to trials: overrides applied to the base config, candidates (grid or seeded
random), the constraints filter, and the rungs of successive halving.

Everything here is a pure function of the base config, the space and (for promotions)
the completed results of earlier rungs taken in trial-id order; never of which worker
finished first. Trial ids are assigned rung by rung: rung 0's trials are the
candidates in order, each later rung's are the promoted candidates in candidate order.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from servesim.config import load_config
from servesim.errors import ServesimError
from servesim.sweep.space import MinGpus, Span, SweepSpace, parameter_values

Override = tuple[str, Any]


# --------------------------------------------------------------------------- overrides


def _set_path(node: Any, keys: list[str], value: Any, path: str) -> int:
    """Set `value` at `keys` under `node`; a `*` key fans out over the keys present. Returns places set."""
    key, rest = keys[0], keys[1:]
    if key == "*":
        if not isinstance(node, dict):
            return 0
        return sum(_set_path(node, [name, *rest], value, path) for name in list(node) if node[name] is not None)
    if not rest:
        node[key] = plain_copy(value)
        return 1
    child = node.get(key)
    if child is None:
        child = node[key] = {}
    elif not isinstance(child, dict):
        raise ServesimError(f"space parameter {path}: {key} is not a mapping in the config")
    return _set_path(child, rest, value, path)


def plain_copy(value: Any) -> Any:
    """A deep copy in which no two places share a mapping or list (YAML anchors, reused dicts)."""
    if isinstance(value, dict):
        return {key: plain_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain_copy(item) for item in value]
    return value


def apply_overrides(base: dict, overrides: Sequence[Override]) -> dict:
    """A copy of `base` with each (dotted path, value) set; a mapping value replaces the subtree.

    Shallower paths are applied first (stable otherwise), so `engine.workers` (a whole
    layout) lands before `engine.workers.*.tp` reaches into it. Nothing in the result is
    shared, so a `*` path sets each role's own copy.
    """
    config = plain_copy(base)
    for path, value in sorted(overrides, key=lambda o: o[0].count(".")):
        if _set_path(config, path.split("."), value, path) == 0:
            raise ServesimError(f"space parameter {path} matches nothing in the config: a * needs the mapping "
                                "before it to exist (e.g. give engine.workers in the config or the space)")
    return config


def config_digest(config: dict) -> str:
    """Hash of a trial's config as given (before validation and defaults)."""
    blob = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def fleet_gpus(config: dict) -> tuple[int, int]:
    """(GPUs of the whole fleet, GPUs of its largest worker) of a config; ServesimError if invalid."""
    roles = load_config(config).config.engine.roles().values()
    per_worker = [role.tp * role.pp * role.attention_dp for role in roles]
    return sum(role.count * w for role, w in zip(roles, per_worker)), max(per_worker)


def fleet_label(config: dict) -> str:
    """`2× agg TP4` or `1× P TP4 + 3× D TP2`, from a (valid) config."""
    short = {"aggregated": "agg", "prefill": "P", "decode": "D"}
    try:
        roles = load_config(config).config.engine.roles()
    except ServesimError:
        return "invalid"
    parts = []
    for name, role in roles.items():
        extra = f" DP{role.attention_dp}" if role.attention_dp > 1 else ""
        parts.append(f"{role.count}× {short[name]} TP{role.tp}{extra}")
    return " + ".join(parts)


def describe_overrides(overrides: Sequence[Override], varying: set[str] | None = None) -> str:
    """The scalar overrides as `name=value`, named by their last path segment (only `varying` paths)."""
    parts = []
    for path, value in overrides:
        if isinstance(value, (dict, list)) or (varying is not None and path not in varying):
            continue
        name = path.rsplit(".", 1)[-1]
        if name in ("tp", "count"):
            continue   # shown in the fleet label
        parts.append(f"{name}={value}")
    return " ".join(parts)


# --------------------------------------------------------------------------- candidates


@dataclass(frozen=True)
class Candidate:
    index: int
    overrides: tuple[Override, ...]   # (path, value) in the space's parameter order
    gpus: int | None                  # None when the config is invalid
    invalid: str | None = None        # its validation error


def prepare_base(base: dict, space: SweepSpace) -> dict:
    """The base config every trial starts from: the sweep's SLOs and request rate applied."""
    config = plain_copy(base)
    if space.slo is not None:
        config["slo"] = {"ttft_ms": space.slo.ttft_ms, "tpot_ms": space.slo.tpot_ms, "e2e_ms": space.slo.e2e_ms}
    if isinstance(space.objective, MinGpus) and space.objective.request_rate is not None:
        workload = config.setdefault("workload", {})
        workload["client"] = {"mode": "poisson", "rate": space.objective.request_rate}
    return config


def _draws(space: SweepSpace) -> tuple[Callable[[], tuple[Override, ...] | None], int]:
    """A generator of override tuples and how many draws it may make."""
    params = list(space.parameters.items())
    if space.search.method == "grid":
        product = itertools.product(*(parameter_values(p) for _, p in params))
        paths = [path for path, _ in params]
        total = math.prod(len(parameter_values(p)) for _, p in params)

        def next_grid() -> tuple[Override, ...] | None:
            values = next(product, None)
            return None if values is None else tuple(zip(paths, values))
        return next_grid, total
    rng = random.Random(space.search.seed)

    def next_random() -> tuple[Override, ...]:
        return tuple((path, param.sample(rng) if isinstance(param, Span) else param[rng.randrange(len(param))])
                     for path, param in params)
    return next_random, 50 * space.search.samples


def make_candidates(base: dict, space: SweepSpace) -> tuple[list[Candidate], dict[str, int]]:
    """The candidates in order, and how many draws were set aside (over budget, duplicate)."""
    draw, limit = _draws(space)
    wanted = space.search.samples if space.search.method == "random" else None
    limits = space.constraints
    seen: set[str] = set()
    candidates: list[Candidate] = []
    skipped = {"over_gpu_budget": 0, "worker_larger_than_node": 0, "duplicate": 0}
    for _ in range(limit):
        if wanted is not None and len(candidates) >= wanted:
            break
        overrides = draw()
        if overrides is None:
            break
        key = json.dumps(overrides, sort_keys=True, default=str)
        if key in seen:
            skipped["duplicate"] += 1
            continue
        seen.add(key)
        config = apply_overrides(base, overrides)
        try:
            gpus, worker_gpus = fleet_gpus(config)
        except ServesimError as err:
            candidates.append(Candidate(len(candidates), overrides, None, str(err)))
            continue
        if limits.max_gpus is not None and gpus > limits.max_gpus:
            skipped["over_gpu_budget"] += 1
            continue
        if limits.gpus_per_node is not None and worker_gpus > limits.gpus_per_node:
            skipped["worker_larger_than_node"] += 1
            continue
        candidates.append(Candidate(len(candidates), overrides, gpus))
    if candidates and all(c.invalid for c in candidates):
        raise ServesimError(f"none of the {len(candidates)} candidate configs is valid; the first: "
                            f"{candidates[0].invalid}")
    if not candidates:
        raise ServesimError("no candidate meets the constraints (max_gpus, gpus_per_node); loosen them or "
                            "change the parameters")
    return candidates, skipped


# --------------------------------------------------------------------------- trials and rungs


@dataclass(frozen=True)
class Trial:
    trial_id: int
    rung: int
    candidate: Candidate
    max_requests: int | None    # the rung's budget; None: the base workload as it is
    config: dict
    config_hash: str

    @property
    def overrides(self) -> list[list[Any]]:
        return [[path, value] for path, value in self.candidate.overrides]


def workload_size(base: dict) -> int:
    """How many requests the base workload sends."""
    from servesim.workload.trace import load_trace

    loaded = load_config(base)
    workload = loaded.config.workload
    path = loaded.trace_path()
    if path is not None:
        return len(load_trace(path, workload.format, workload.max_requests)[0])
    if workload.sessions is not None:   # halving runs rungs by max_requests, which sessions do not take
        raise ServesimError("search.halving limits each rung's requests with workload.max_requests, which a "
                            "workload.sessions base does not take; sweep sessions without halving")
    return min(workload.synthetic.num_requests, workload.max_requests or 1 << 62)


class Plan:
    """The candidates, the rung budgets and sizes, and the trials of each rung."""

    def __init__(self, base: dict, space: SweepSpace) -> None:
        self.space = space
        self.base = prepare_base(base, space)
        self.candidates, self.skipped = make_candidates(self.base, space)
        halving = space.search.halving
        self.budgets: list[int | None] = [None]
        if halving is not None:
            total = workload_size(self.base)
            budgets: list[int | None] = []
            budget = halving.min_requests
            while budget < total:
                budgets.append(budget)
                budget *= halving.eta
            self.budgets = budgets + [None]
        self.sizes = [len(self.candidates)]
        for _ in self.budgets[1:]:
            self.sizes.append(max(1, math.ceil(self.sizes[-1] / halving.eta)))
        self.first_ids = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
        self._labels: dict[int, str] = {}

    @property
    def varying(self) -> set[str]:
        """Parameters with more than one value (the others are the same in every trial)."""
        return {path for path, param in self.space.parameters.items()
                if parameter_values(param) is None or len(parameter_values(param)) > 1}

    def describe(self, candidate: Candidate) -> str:
        return describe_overrides(candidate.overrides, self.varying)

    def label(self, candidate: Candidate) -> str:
        """The candidate's fleet, e.g. `2× agg TP4` (worked out once per candidate)."""
        if candidate.index not in self._labels:
            self._labels[candidate.index] = fleet_label(apply_overrides(self.base, candidate.overrides))
        return self._labels[candidate.index]

    @property
    def total_trials(self) -> int:
        return sum(self.sizes)

    @property
    def final_rung(self) -> int:
        return len(self.budgets) - 1

    def trials(self, rung: int, candidates: Sequence[Candidate]) -> list[Trial]:
        """The trials of `rung` for these candidates (all of them at rung 0), in candidate order."""
        out = []
        budget = self.budgets[rung]
        for offset, candidate in enumerate(sorted(candidates, key=lambda c: c.index)):
            config = apply_overrides(self.base, candidate.overrides)
            if budget is not None:
                config.setdefault("workload", {})["max_requests"] = budget
            out.append(Trial(self.first_ids[rung] + offset, rung, candidate, budget, config,
                             config_digest(config)))
        return out


def promote(trials: Sequence[Trial], rows: dict[int, dict], keep: int,
            rank_key: Callable[[dict], tuple]) -> list[Candidate]:
    """The `keep` best candidates of a completed rung, by `rank_key` of their rows, then trial id."""
    missing = [t.trial_id for t in trials if t.trial_id not in rows]
    if missing:
        raise RuntimeError(f"promotion from an incomplete rung (trials {missing[:5]} missing)")
    ranked = sorted(trials, key=lambda t: (rank_key(rows[t.trial_id]), t.trial_id))
    return sorted((t.candidate for t in ranked[:keep]), key=lambda c: c.index)
