"""Validation errors as one sentence: where (a dotted key), what is wrong, and who set it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from servesim.schema_base import StrictModel


# The keys whose value names a variant of a discriminated union (timing kind, client mode, draft method).
TAG_KEYS = ("kind", "mode", "method")

def _format_location(loc: tuple, data: Any) -> str:
    """Dotted path of a validation error, without pydantic's union-tag steps."""
    parts: list[str] = []
    node = data
    for step in loc:
        if isinstance(node, dict) and step in node:
            parts.append(str(step))
            node = node[step]
        elif isinstance(node, list) and isinstance(step, int) and step < len(node):
            parts.append(f"[{step}]")
            node = node[step]
        elif isinstance(node, dict) and isinstance(step, str) and step in [node.get(k) for k in TAG_KEYS]:
            continue  # the tag pydantic inserts for a discriminated union
        elif isinstance(step, str) and (
            step[:1].isupper() or any(c in step for c in "[-,") or step in _UNION_MEMBER_WORDS
        ):
            continue  # a union member's name, e.g. "constrained-int" or "LengthRange"
        else:
            parts.append(str(step))
            node = None
    return ".".join(parts).replace(".[", "[")


_UNION_MEMBER_WORDS = {"int", "float", "bool", "str", "none", "list", "dict"}
_TYPE_WORDS = {
    "bool_type": "true or false",
    "int_type": "an integer",
    "float_type": "a number",
    "string_type": "a string",
    "dict_type": "a mapping",
    "list_type": "a list",
    "model_type": "a mapping",
}


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}" (a string)'
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def _counterpart(key: str, backend: str) -> str | None:
    """`backend`'s name for the setting some engine calls `key` (None: it has none)."""
    from servesim.engine.backend import COUNTERPART_CONCEPTS
    from servesim.engine.registry import BACKENDS, get_backend

    for concept in COUNTERPART_CONCEPTS:
        names = [b.counterparts[concept] for b in BACKENDS.values() if concept in b.counterparts]
        if any(name.lstrip("!") == key for name in names):
            twin = get_backend(backend).counterpart_of(concept)
            if twin is not None:
                return twin
    return None


def scheduler_fault_sentence(fault, backend, source_of: Callable[[str], str] | None = None) -> str:
    """What is wrong with a role's scheduler (a config.schema.SchedulerFault under `backend`);
    `source_of(dotted key)` names the file or --set behind it (None: named by no source)."""
    where = fault.where

    def named(key: str, what: str) -> str:
        return f"{source_of(key)}: {what}" if source_of is not None else what

    if fault.error is not None:
        if source_of is None:
            return error_sentence(fault.error, fault.data, "", prefix=where).removeprefix(": ")
        return error_sentence(fault.error, fault.data, source_of(where), prefix=where, blame=source_of)
    if fault.key is None:
        return named(where, f"{where} must be a mapping, got {_describe(fault.data)}")
    twin = _counterpart(fault.key, backend.name)
    hint = f"; {backend.label}'s counterpart is {twin}" if twin else ""
    return named(f"{where}.{fault.key}", f"{where}.{fault.key} is a {fault.owner} setting, "
                                         f"not valid with engine.backend {backend.name}{hint}")


def error_sentence(err: ValidationError, data: Any, source: str, prefix: str = "",
                    blame: Callable[[str], str | None] | None = None) -> str:
    """One sentence for a validation error; `blame(where)` may name the --set behind it instead of `source`."""
    errors = err.errors(include_url=False)
    # A union reports one complaint per member; a type mismatch usually means the wrong
    # member, so prefer the deepest error that is not one.
    # At equal depth an unknown key goes first: a misspelt key also makes the intended one "missing".
    first = max(errors, key=lambda e: (len(e["loc"]), not e["type"].endswith("_type"),
                                       e["type"] == "extra_forbidden")) if errors else None
    if first is None:
        return f"{source}: invalid configuration"
    where = ".".join(p for p in (prefix, _format_location(first["loc"], data)) if p)
    source = (blame(where) if blame is not None else None) or source
    kind = first["type"]
    if kind == "extra_forbidden":
        from servesim.config.hints import did_you_mean

        what = f"unknown key {where}" + did_you_mean(StrictModel, err.title, tuple(first["loc"]))
    elif kind in _TYPE_WORDS:
        what = f"{where} must be {_TYPE_WORDS[kind]}, got {_describe(first.get('input'))}"
    elif kind == "missing":
        what = f"{where} is required"
    elif kind == "union_tag_invalid":
        ctx = first.get("ctx", {})
        what = f"{where}: {ctx.get('discriminator', 'tag')} must be one of {ctx.get('expected_tags')}"
    elif kind == "value_error":
        msg = str(first.get("ctx", {}).get("error", first["msg"]))
        what = f"{where}: {msg}" if where else msg
    else:
        msg = first["msg"]
        msg = msg[0].lower() + msg[1:] if msg else msg
        what = f"{where}: {msg}, got {_describe(first.get('input'))}" if where else msg
    extra = len({tuple(e["loc"][:1]) for e in errors}) - 1
    more = f" (and {extra} more)" if extra > 0 else ""
    return f"{source}: {what}{more}"
