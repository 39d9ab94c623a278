"""Argument checks for the Python API, `servesim.simulate(...)`.

The CLI's options arrive already typed; Python callers can pass anything. Each wrong
type is one ServesimError sentence in the API's own terms (`simulate(seed=...)`, not
`--seed`), raised before any work starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from os import PathLike
from typing import Any

from servesim.errors import ServesimError
from servesim.yaml_io import check_size


def _kind(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"[:80]


def check_simulate_arguments(config: Any, trace: Any, seed: Any, overrides: Any, pass_log: Any,
                             progress: Any) -> list[tuple[str, Any, str]]:
    """Validate simulate()'s arguments; returns the overrides as (dotted key, value, label) triples."""
    from servesim.config import SimulationConfig

    if not (config is None or isinstance(config, (SimulationConfig, dict, str, PathLike))):
        raise ServesimError(f"simulate(config=...) takes a SimulationConfig, a dict, a YAML file path or None, "
                            f"got {_kind(config)}")
    if isinstance(config, dict):
        check_size(config, "simulate(config=...)")
    if not (trace is None or isinstance(trace, (str, PathLike))):
        raise ServesimError(f"simulate(trace=...) takes a file path or None, got {_kind(trace)}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ServesimError(f"simulate(seed=...) takes a non-negative integer or None, got {_kind(seed)}")
    if pass_log is not None and not callable(getattr(pass_log, "write", None)):
        raise ServesimError(f"simulate(pass_log=...) takes an open text file (anything with .write) or None, "
                            f"got {_kind(pass_log)}")
    if progress is not None and not callable(progress):
        raise ServesimError(f"simulate(progress=...) takes a function progress(sim_ns, done, total) or None, "
                            f"got {_kind(progress)}")
    return _overrides(overrides)


def _overrides(overrides: Any) -> list[tuple[str, Any, str]]:
    """(dotted.key, value) pairs, or a mapping {dotted.key: value}, each labelled for errors
    (`overrides[0] seed`: servesim/config/overrides.py names the override behind an error by it)."""
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        overrides = list(overrides.items())
    if isinstance(overrides, (str, bytes)) or not isinstance(overrides, (list, tuple)):
        raise ServesimError("simulate(overrides=...) takes a list of (dotted.key, value) pairs or a dict, "
                            f"got {_kind(overrides)}")
    out = []
    for i, pair in enumerate(overrides):
        # A third item is the label errors name the override by (the CLI passes "--set KEY").
        if not isinstance(pair, (list, tuple)) or len(pair) not in (2, 3) or (
                len(pair) == 3 and not isinstance(pair[2], str)):
            raise ServesimError(f"simulate(overrides=...): item {i} must be a (dotted.key, value) pair, "
                                f"got {_kind(pair)}")
        key, value = pair[0], pair[1]
        if not isinstance(key, str) or not all(key.split(".")):
            raise ServesimError(f"simulate(overrides=...): item {i}'s key must be a dotted path like "
                                f"engine.timing.kind, got {key!r}")
        check_size(value, f"simulate(overrides=...) item {i}")
        out.append((key, value, pair[2] if len(pair) == 3 else f"overrides[{i}] {key}"))
    return out
