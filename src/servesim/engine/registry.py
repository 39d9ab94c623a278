"""Every engine servesim models, one line each (the Backend objects live in their packages).

Adding an engine is a package engine/<name>/ with its backend.py, and one line here
(docs/modeling/backends.md). The order is the order errors and `--version` list them.
"""

from __future__ import annotations

from typing import Any

from servesim.engine.backend import Backend
from servesim.engine.sglang.backend import SGLANG
from servesim.engine.trtllm.backend import TRTLLM
from servesim.engine.vllm.backend import VLLM

BACKENDS: dict[str, Backend] = {backend.name: backend for backend in (
    VLLM,
    SGLANG,
    TRTLLM,
)}

DEFAULT_BACKEND = VLLM.name   # engine.backend when a config names none


def get_backend(name: str) -> Backend:
    """The Backend called `name` (a validated engine.backend is always one)."""
    return BACKENDS[name]


def backend_of(sched: Any) -> Backend:
    """The Backend whose scheduler schema `sched` is an instance of."""
    return BACKENDS[type(sched).backend_name]


def engine_versions_line() -> str:
    """`vLLM 0.32.0, SGLang 0.5.9, TensorRT-LLM 1.2.0rc2`: each engine's newest modelled version."""
    return ", ".join(f"{b.label} {b.newest_version}" for b in BACKENDS.values())
