"""Built-in model architectures, stored as data files beside this module.

Each file holds the Hugging Face `config.json` fields of one model plus the
names it answers to. A model is found by its short name or any Hugging Face
id, case-insensitively.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from servesim.errors import ServesimError


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    hf_ids: tuple[str, ...]
    config: dict[str, Any]

    @property
    def context_length(self) -> int:
        return int(self.config["max_position_embeddings"])


@cache
def _catalog() -> dict[str, ModelSpec]:
    specs = {}
    for entry in sorted(resources.files("servesim.models").joinpath("data").iterdir(), key=lambda p: p.name):
        if not entry.name.endswith(".json"):
            continue
        raw = json.loads(entry.read_text())
        spec = ModelSpec(raw["name"], tuple(raw.get("hf_ids", ())), raw["config"])
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


def resolve_model(name: str) -> ModelSpec:
    spec = _aliases().get(name.lower())
    if spec is not None:
        return spec
    close = difflib.get_close_matches(name.lower(), list(_aliases()), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known models: {', '.join(_catalog())}"
    raise ServesimError(f"unknown model {name!r}{hint}")
