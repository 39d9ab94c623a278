"""What an engine's launch command is made from, and what it gives back (`servesim deploy`).

Each engine package writes its own server's command line from one role's resolved settings
(engine/<backend>/launch.py, the `Backend.launch` field); servesim/deploy/ writes the files
around it. The command carries exactly the settings the simulation used. Two kinds of value
are not written as flags, and are listed in the output folder's README instead:

- sizes the engine derives from GPU memory (vLLM's KV blocks, SGLang's KV pool): the
  command gives the memory fraction the simulation sized them from, unless the user pinned
  the size itself, and the README gives the size predicted so the user can check the
  engine's start-up log;
- settings the engine needs that servesim does not model: left at the engine's default.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from servesim.errors import ServesimError


@dataclass(frozen=True)
class RoleLaunch:
    """One role's resolved settings, as a launch command needs them."""

    role: str                      # "aggregated", "prefill" or "decode"
    engine_version: str
    model_path: str                # the checkpoint the server loads (a Hugging Face id or a path)
    served_model_name: str
    port: int
    tp: int
    pp: int
    ep: int
    attention_dp: int
    gpus_per_host: int            # GPUs one server holds (the catalogue's)
    gpu_memory_utilization: float
    scheduler: Any                 # the backend's resolved scheduler settings
    pinned: frozenset[str]         # scheduler keys the user's config set itself
    speculative: Any               # SpeculativeConfig or None
    kv_offload: Any                # KvOffloadConfig or None
    precision: str                 # weights and GEMMs as simulated ("bf16", "fp8", ...)
    checkpoint_precision: str      # the checkpoint's own
    kv_cache_dtype: str            # "auto", "bf16" or "fp8"
    disaggregated: bool
    predicted_kv_tokens: int       # the KV capacity the simulation gave one worker

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.attention_dp

    @property
    def nodes(self) -> int:
        return -(-self.gpus // self.gpus_per_host)

    @property
    def where(self) -> str:
        return f"engine.workers.{self.role}"


@dataclass(frozen=True)
class LaunchCommand:
    """One worker's server: its command line, environment, extra files and container image."""

    argv: tuple[str, ...]
    image: str
    env: tuple[tuple[str, str], ...] = ()
    files: tuple[tuple[str, str], ...] = ()       # (file name, text) the command reads
    # (setting, why) for what the README must say: derived sizes, engine defaults kept.
    notes: tuple[tuple[str, str], ...] = ()
    health_path: str = "/health"
    # Extra lines for the other nodes of a worker wider than one node (None: one node).
    follower_argv: tuple[str, ...] | None = None


@dataclass
class ArgvBuilder:
    """Collects a command line and its README notes in the order they are written."""

    argv: list[str]
    notes: list[tuple[str, str]] = field(default_factory=list)
    env: list[tuple[str, str]] = field(default_factory=list)

    def add(self, flag: str, value: Any = None) -> None:
        self.argv.append(flag)
        if value is not None:
            self.argv.append(value if isinstance(value, str) else json_or_str(value))

    def note(self, setting: str, why: str) -> None:
        self.notes.append((setting, why))


def json_or_str(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


def unsupported(launch: RoleLaunch, label: str, what: str) -> ServesimError:
    """A setting the simulation used that this engine version's server cannot be given."""
    return ServesimError(f"{launch.where}: {what}, which {label} {launch.engine_version}'s server cannot be "
                         f"launched with; change it in the config, or deploy by hand")


@dataclass(frozen=True)
class RoleAddress:
    role: str
    host: str       # where the role's servers are reached (a Service name, or a host)
    port: int
    replicas: int


@dataclass(frozen=True)
class FrontLaunch:
    """What the front (P/D proxy, router) in front of the roles needs."""

    roles: tuple[RoleAddress, ...]
    port: int
    router_policy: str          # router.policy as simulated
    engine_version: str

    def role(self, name: str) -> RoleAddress | None:
        return next((r for r in self.roles if r.role == name), None)


def without_flags(argv, flags: set[str]) -> list[str]:
    """argv without the given flags and their values."""
    out, i = [], 0
    while i < len(argv):
        word = argv[i]
        has_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
        if word not in flags:
            out.extend(argv[i:i + 2] if has_value else [word])
        i += 2 if has_value else 1
    return out


def precision_flags(cmd: ArgvBuilder, launch: RoleLaunch, label: str, kv_dtypes: dict[str, str]) -> None:
    """`--quantization fp8` for fp8 weights from a bf16 checkpoint (vLLM and SGLang quantize on load),
    a note for formats that need a checkpoint quantized ahead, and `--kv-cache-dtype` in the engine's
    spelling (`kv_dtypes`)."""
    if launch.precision != launch.checkpoint_precision:
        if launch.precision == "fp8":
            cmd.add("--quantization", "fp8")
        else:
            cmd.note("model", f"the simulation ran {launch.precision} weights, which {label} loads from a "
                     "checkpoint quantized ahead (pass its path with --model-path)")
    if launch.kv_cache_dtype != "auto":
        cmd.add("--kv-cache-dtype", kv_dtypes[launch.kv_cache_dtype])
