"""Overrides (`--set`, `--trace`, the `vllm bench serve` shorthands) applied as a user means them.

An override replaces one field of the file's config before validation; three kinds of
change also touch the fields around it, which would otherwise be left over from the file:

- a new tag (`workload.client.mode`, `engine.timing.kind`) drops the file's fields that
  belong only to the old variant (`time_scale` when open_loop becomes poisson);
- a new `engine.backend` carries each role's scheduler keys over to the new engine's
  counterparts (servesim/config/backend_switch.py), or refuses naming those without one;
- a new trace (`workload.trace`, or `--trace`) has its format inferred from the file
  unless an override also sets `workload.format` (likewise `lengths_from` and
  `lengths_format`); a new source (`trace`, `synthetic` or `sessions`) drops the file's
  other two.

Fields the overrides themselves set are never dropped. `OverrideLog.blame` names the
override behind a validation error, so the error names the `--set` and not the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, get_args

from servesim.config import ClientConfig, TimingConfig, set_dotted
from servesim.config.errors import TAG_KEYS
from servesim.engine.registry import DEFAULT_BACKEND

Override = tuple  # (dotted key, value) or (dotted key, value, label naming it in errors)

def _variants(union: Any, tag: str) -> dict[str, set[str]]:
    members = get_args(get_args(union)[0]) if get_args(union) else ()
    out = {}
    for member in members:
        for value in get_args(member.model_fields[tag].annotation):
            out[value] = set(member.model_fields)
    return out


# Mappings chosen by a tag: path → (tag key, {tag value: field names of that variant}).
# (A speculative `method` changes no fields: every method has the same keys.)
_TAGGED: dict[str, tuple[str, dict[str, set[str]]]] = {
    "workload.client": ("mode", _variants(ClientConfig, "mode")),
    "engine.timing": ("kind", _variants(TimingConfig, "kind")),
}


@dataclass
class OverrideLog:
    """Which dotted keys the overrides set (in order), and how each is named in errors."""

    keys: list[tuple[str, str]] = field(default_factory=list)   # (dotted key, label)
    carried: dict[str, str] = field(default_factory=dict)       # scheduler key path → backend label

    def covers(self, path: str) -> bool:
        """Whether an override set `path` itself or a mapping holding it."""
        return any(path == key or path.startswith(key + ".") for key, _ in self.keys)

    def label_of(self, key: str) -> str | None:
        return next((label for k, label in reversed(self.keys) if k == key), None)

    def blame(self, where: str) -> str | None:
        """The override an error at dotted `where` comes from, or None (then it is the file's)."""
        for key, label in reversed(self.keys):
            if where == key or where.startswith(key + ".") or key.startswith(where + ".") or not where:
                return label
        for key, label in self.carried.items():   # a scheduler key carried over to a new backend
            if where == key or key.startswith(where + "."):
                return label
        parent = where.rsplit(".", 1)[0] if "." in where else ""
        for key, label in reversed(self.keys):
            # A new tag makes its variant's own keys required (or unknown).
            if key.rsplit(".", 1)[-1] in TAG_KEYS and parent and key.startswith(parent + "."):
                return label
        return None


def _node(data: Any, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _pop(data: dict, path: str) -> None:
    parent, _, key = path.rpartition(".")
    node = _node(data, parent) if parent else data
    if isinstance(node, dict):
        node.pop(key, None)


def _backend(data: dict) -> str:
    engine = data.get("engine")
    return engine.get("backend", DEFAULT_BACKEND) if isinstance(engine, dict) else DEFAULT_BACKEND


def apply_overrides(data: dict, overrides: list[Override], source: str) -> OverrideLog:
    """Apply `overrides` to the raw config `data` in order (in place); `source` names the file."""
    log = OverrideLog()
    if not overrides:
        return log
    file_backend = _backend(data)
    for item in overrides:
        key, value = item[0], item[1]
        label = item[2] if len(item) > 2 else f"--set {key}"
        parent, _, last = key.rpartition(".")
        tagged = _TAGGED.get(parent)
        before = _node(data, parent) if tagged and last == tagged[0] else None
        old_tag = before.get(last) if isinstance(before, dict) else None
        set_dotted(data, key, value)
        log.keys.append((key, label))
        if isinstance(before, dict) and isinstance(value, str) and old_tag != value and value in tagged[1]:
            _drop_foreign_fields(data, parent, tagged[1][value], log)
    _switch_source(data, log)
    _infer_formats(data, log)
    new_backend = _backend(data)
    if new_backend != file_backend and log.covers("engine.backend"):
        from servesim.config.backend_switch import carry_schedulers

        carry_schedulers(data, file_backend, new_backend, log, source)
        if not log.covers("engine.version"):
            # A version is one engine's: the file's (a resolved config has one) does not carry over.
            data["engine"].pop("version", None)
    return log


def _drop_foreign_fields(data: dict, path: str, fields: set[str], log: OverrideLog) -> None:
    node = _node(data, path)
    for key in [k for k in node if k not in fields]:
        if not log.covers(f"{path}.{key}"):
            del node[key]


def _switch_source(data: dict, log: OverrideLog) -> None:
    """A workload source (trace, synthetic, sessions) given by an override replaces the file's other ones."""
    workload = data.get("workload")
    if not isinstance(workload, dict) or log.covers("workload"):
        return
    given = {"trace": workload.get("trace") is not None and log.covers("workload.trace")}
    for source in ("synthetic", "sessions"):
        given[source] = (workload.get(source) is not None
                         and any(key.startswith(f"workload.{source}") for key, _ in log.keys))
    if not any(given.values()):
        return
    for source, set_here in given.items():
        if not set_here and not log.covers(f"workload.{source}"):
            workload.pop(source, None)
    if not given["trace"] and not log.covers("workload.format"):
        workload.pop("format", None)


def _infer_formats(data: dict, log: OverrideLog) -> None:
    """A file named by an override is read in its own format, unless an override names one."""
    for path, fmt in (("workload.trace", "workload.format"),
                      ("workload.synthetic.lengths_from", "workload.synthetic.lengths_format")):
        if log.covers(path) and not log.covers(fmt) and not log.covers(path.rsplit(".", 1)[0]):
            _pop(data, fmt)

