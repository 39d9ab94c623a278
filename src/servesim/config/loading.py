"""Loading a config: a file, dict or model, with overrides, validated into a SimulationConfig.

`load_config` validates a config in one pass, engine.backend choosing each role's
scheduler schema (its Backend in engine/registry.py; config/schema.py's EngineConfig).
A scheduler's own error is reported only once the rest is valid, then the backend's
feature rules; each error names the file or the override behind it (config/errors.py
words it).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from servesim.config.autoscaling import check_autoscaling
from servesim.config.errors import _describe, error_sentence, scheduler_fault_sentence
from servesim.config.schema import SCHEDULER_FAULTS, SchedulerFault, SimulationConfig
from servesim.engine.registry import BACKENDS, get_backend
from servesim.errors import ServesimError
from servesim.yaml_io import dump_yaml, load_yaml, read_text


def set_dotted(data: dict, dotted: str, value: Any) -> None:
    """Set `a.b.c` in nested dicts, creating the intermediate mappings."""
    keys = dotted.split(".")
    if not all(keys):
        raise ServesimError(f"--set {dotted!r}: the key must be a dotted path like engine.timing.kind")
    node = data
    for key in keys[:-1]:
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        elif not isinstance(child, dict):
            raise ServesimError(f"override {dotted}: {key} is {_describe(child)}, not a mapping")
        node = child
    node[keys[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """`key.path=YAML` → (path, parsed value)."""
    if "=" not in text:
        raise ServesimError(f"--set {text!r}: expected dotted.key=VALUE")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not all(key.split(".")):   # named here, before simulate() sees it as an API argument
        raise ServesimError(f"--set {text!r}: the key must be a dotted path like engine.timing.kind")
    return key, load_yaml(raw, f"--set {key}")


class LoadedConfig:
    """A validated config plus where relative paths in it are anchored."""

    def __init__(self, config: SimulationConfig, base_dir: Path, source: str, overrides=None):
        self.config = config
        self.base_dir = base_dir
        self.source = source
        self.overrides = overrides   # servesim.config.overrides.OverrideLog: which override set what

    def source_of(self, where: str) -> str:
        """What an error about dotted field `where` should name: the override that set it, else the file."""
        return (self.overrides.blame(where) if self.overrides is not None else None) or self.source

    def trace_path(self) -> Path | None:
        trace = self.config.workload.trace
        if trace is None:
            return None
        path = Path(trace).expanduser()
        return path if path.is_absolute() else (self.base_dir / path)


def default_config_path() -> Path:
    from importlib import resources

    return Path(str(resources.files("servesim").joinpath("data", "default.yaml")))


def read_config_file(path: Path) -> dict:
    data = load_yaml(read_text(path, "config file"), str(path))
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ServesimError(f"{path}: the config must be a mapping of keys to values")
    return data


def _check_roles(config: SimulationConfig, faults: dict[str, SchedulerFault],
                 source_of: Callable[[str], str]) -> None:
    """engine.version, then role by role its scheduler's fault (config/schema.py set it aside) and
    the backend's feature rules. `source_of(dotted key)` names what set that key: the file, or a --set.
    """
    backend = get_backend(config.engine.backend)
    version = config.engine.version
    if version is not None and version not in backend.versions:
        modelled = ", ".join(backend.versions)
        raise ServesimError(f"{source_of('engine.version')}: engine.version {version} is not a {backend.label} version "
                            f"servesim models; it models {modelled} (leave engine.version unset for the newest)")
    for role, role_cfg in config.engine.roles().items():
        where = f"engine.workers.{role}.scheduler"
        if role in faults:
            raise ServesimError(scheduler_fault_sentence(faults[role], backend, source_of))
        backend.check_role(role_cfg, where, source_of)
        check_autoscaling(role, role_cfg, source_of)
        where_role = where.rsplit(".", 1)[0]
        if role_cfg.kv_offload is not None:
            if not backend.kv_offload:
                modelled = " and ".join(b.name for b in BACKENDS.values() if b.kv_offload)
                raise ServesimError(f"{source_of(where_role + '.kv_offload')}: {where_role}.kv_offload is "
                                    f"modelled for {modelled}, not {backend.name}")
            if not role_cfg.scheduler.prefix_caching:
                raise ServesimError(f"{source_of(where_role + '.kv_offload')}: {where_role}.kv_offload needs "
                                    f"the prefix cache, which {where} turns off")


def load_config(
    config: SimulationConfig | dict | str | Path | None = None,
    overrides: list[tuple[str, Any]] | None = None,
) -> LoadedConfig:
    """Validate a config given as a model, a dict, or a YAML path (None = the embedded default)."""
    if isinstance(config, SimulationConfig):
        data, base_dir, source = config.model_dump(mode="python"), Path.cwd(), "config"
    elif isinstance(config, dict):
        data, base_dir, source = copy.deepcopy(config), Path.cwd(), "config"
    else:
        path = default_config_path() if config is None else Path(config)
        data, base_dir = read_config_file(path), path.resolve().parent
        source = EMBEDDED_DEFAULT if config is None else str(path)
    # Overrides as the user means them (servesim/config/overrides.py): a new tag or backend drops or
    # carries over the old variant's keys, a new trace has its format inferred.
    from servesim.config.overrides import apply_overrides

    log = apply_overrides(data, overrides or [], source)
    # engine.backend picks each scheduler's schema inside the validation (EngineConfig); a faulty
    # scheduler is set aside in `faults` and reported only once everything else is valid.
    faults: dict[str, SchedulerFault] = {}
    try:
        model = SimulationConfig.model_validate(data, context={SCHEDULER_FAULTS: faults})
    except ValidationError as err:
        raise ServesimError(error_sentence(err, data, source, blame=log.blame)) from None
    loaded = LoadedConfig(model, base_dir, source, log)
    _check_roles(model, faults, loaded.source_of)
    return loaded


# How errors in the packaged default.yaml (reached only through overrides) name their source.
EMBEDDED_DEFAULT = "the embedded default config"


def config_hash(config: SimulationConfig) -> str:
    blob = json.dumps(config.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def config_to_yaml(config: SimulationConfig) -> str:
    return dump_yaml(config.model_dump(mode="json"))
