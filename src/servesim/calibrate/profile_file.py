"""PROFILE.yaml: a roofline profile `servesim calibrate` fitted, read by `engine.timing.profile_file`.

    # servesim calibrate profile
    gpu: h100-sxm            # the catalogue name it was fitted for
    backend: vllm
    base: h100-sxm/vllm      # the shipped fit it started from
    parameters: {gemm_efficiency: 0.47, ...}   # every RooflineProfile field
    fitted: [...]            # the parameters the files moved
    unconstrained: [...]     # those they could not constrain (base values kept)
    files: [...]             # the result files it was fitted on

A run's GPU and backend must be the profile's: its efficiencies describe that pair.
"""

from __future__ import annotations

from dataclasses import fields
from functools import lru_cache
from pathlib import Path

import yaml

from servesim.errors import ServesimError
from servesim.timing.roofline import RooflineProfile

KIND = "servesim calibrate profile"


def profile_document(gpu: str, backend: str, base: str, profile: RooflineProfile, fitted: list[str],
                     unconstrained: list[str], files: list[str], report: dict) -> dict:
    return {"kind": KIND, "gpu": gpu, "backend": backend, "base": base,
            "parameters": {f.name: float(getattr(profile, f.name)) for f in fields(RooflineProfile)},
            "fitted": fitted, "unconstrained": unconstrained, "files": files, "report": report}


@lru_cache(maxsize=32)
def _read(path: str, mtime_ns: int) -> dict:
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ServesimError(f"engine.timing.profile_file {path} is not valid YAML{where}") from None
    except UnicodeDecodeError:
        raise ServesimError(f"engine.timing.profile_file {path} is not UTF-8 text") from None
    if not isinstance(data, dict) or data.get("kind") != KIND or not isinstance(data.get("parameters"), dict):
        raise ServesimError(f"engine.timing.profile_file {path} is not a profile servesim calibrate wrote "
                            f"(no 'kind: {KIND}' with parameters)")
    return data


def load_profile_file(path: str | Path, gpu: str, backend: str) -> RooflineProfile:
    """The profile in `path`, checked against the run's GPU and backend."""
    path = Path(path)
    if not path.is_file():
        problem = "is a folder, not a file" if path.is_dir() else "does not exist"
        raise ServesimError(f"engine.timing.profile_file {path} {problem}")
    data = _read(str(path), path.stat().st_mtime_ns)
    if (data.get("gpu"), data.get("backend")) != (gpu, backend):
        raise ServesimError(f"engine.timing.profile_file {path} was fitted for {data.get('gpu')}/"
                            f"{data.get('backend')}, but this run is {gpu}/{backend}")
    known = {f.name for f in fields(RooflineProfile)}
    values = {}
    for name, value in data["parameters"].items():
        if name not in known:
            raise ServesimError(f"engine.timing.profile_file {path}: unknown parameter {name!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or value > 1e6:
            raise ServesimError(f"engine.timing.profile_file {path}: {name} must be a non-negative number, "
                                f"got {value!r}")
        values[name] = float(value)
    return RooflineProfile.from_dict(values)
