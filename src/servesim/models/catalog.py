"""Built-in model architectures, stored as data files beside this module.

Each file holds the Hugging Face `config.json` fields of one model plus the
names it answers to. A model is found by its short name or any Hugging Face
id, case-insensitively.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import cache, cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from servesim.errors import ServesimError
from servesim.models.architecture import Architecture, ModelConfigError
from servesim.yaml_io import read_text


@dataclass(frozen=True)
class ModelSpec:
    name: str
    hf_ids: tuple[str, ...]
    config: dict[str, Any]
    source: str = ""
    # The tokenizer family the servers load for it (engine/request_path.py prices it per token).
    tokenizer: str = "hf-fast"

    @cached_property
    def arch(self) -> Architecture:
        try:
            return Architecture.from_hf(self.name, self.config)
        except ModelConfigError as err:
            raise ServesimError(f"model {self.name}: {err}") from None
        except (KeyError, TypeError, ValueError) as err:
            raise ServesimError(f"model {self.name}: its config.json lacks a field servesim needs ({err})") from None

    @property
    def context_length(self) -> int:
        return self.arch.context_length


@cache
def _catalog() -> dict[str, ModelSpec]:
    specs = {}
    for entry in sorted(resources.files("servesim.models").joinpath("data").iterdir(), key=lambda p: p.name):
        if not entry.name.endswith(".json"):
            continue
        raw = json.loads(entry.read_text())
        spec = ModelSpec(raw["name"], tuple(raw.get("hf_ids", ())), raw["config"], raw.get("source", ""),
                         raw.get("tokenizer", "hf-fast"))
        specs[spec.name] = spec
    return specs


@cache
def _aliases() -> dict[str, ModelSpec]:
    table = {}
    for spec in _catalog().values():
        for alias in (spec.name, *spec.hf_ids):
            table[alias.lower()] = spec
    return table


def list_models() -> list[ModelSpec]:
    return list(_catalog().values())


def load_config_json(path: Path) -> ModelSpec:
    """A model described by a Hugging Face config.json file."""
    text = read_text(path, "model config")
    try:
        config = json.loads(text)
    except json.JSONDecodeError as err:
        raise ServesimError(f"model config {path} is not valid JSON ({err})") from None
    except RecursionError:
        raise ServesimError(f"model config {path} is not valid JSON (nested too deeply)") from None
    if not isinstance(config, dict):
        raise ServesimError(f"model config {path} is not a JSON object")
    spec = ModelSpec(str(path), (), config, str(path))
    spec.arch  # noqa: B018 - validate now, with a clear error
    return spec


def resolve_model(name: str, base_dir: Path | None = None) -> ModelSpec:
    spec = _aliases().get(name.lower())
    if spec is not None:
        return spec
    if name.endswith(".json") or "/" in name and Path(name).suffix == ".json":
        path = Path(name).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        return load_config_json(path)
    close = difflib.get_close_matches(name.lower(), list(_aliases()), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known models: {', '.join(_catalog())}"
    raise ServesimError(f"unknown model {name!r}{hint}")
