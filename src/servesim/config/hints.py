"""'Did you mean ...?' for a misspelt config key, from the keys valid where it was written.

pydantic reports an unknown key (extra="forbid") with its location, e.g. ("engine",
"workers", "aggregated", "max_num_seq"), and the name of the model it validated; walking
that model's fields along the location finds the model that holds the key, whose field
names are the candidates, as `servesim.models.catalog.resolve_model` does for model names.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from typing import Any, Literal

from pydantic import BaseModel

_LIST_UNDER = 8   # with no close match, list the valid keys when there are at most this many


def _members(annotation: Any) -> list[Any]:
    """The types an annotation admits, with Annotated, Optional and unions unwrapped."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _members(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return [m for arg in typing.get_args(annotation) for m in _members(arg)]
    return [annotation]


def _is_model(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, BaseModel)


def _names_member(model: type[BaseModel], step: Any) -> bool:
    """Whether `step` is the union-member step pydantic inserts for `model`: its class name
    (a plain union) or its tag, the value of a Literal field (a discriminated union)."""
    if step == model.__name__:
        return True
    validated = re.fullmatch(r"function-\w+\[.*, (\w+)\]", step) if isinstance(step, str) else None
    if validated and validated.group(1) == model.__name__:   # a model with a validator: function-after[f(), Name]
        return True
    for field in model.model_fields.values():
        if typing.get_origin(field.annotation) is Literal and step in typing.get_args(field.annotation):
            return True
    return False


def _step(t: Any, step: Any) -> list[Any]:
    """What a value of type `t` holds at `step` of an error location."""
    if _is_model(t):
        if isinstance(step, str) and step in t.model_fields:
            return [t.model_fields[step].annotation]
        return [t] if _names_member(t, step) else []
    origin = typing.get_origin(t)
    args = typing.get_args(t)
    if origin is dict and args and isinstance(step, str):
        return [args[1]]
    if origin in (list, tuple) and args and isinstance(step, int):
        return [args[0]]
    return []


def keys_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """The field names of the model(s) a value at `loc` (below `model`) is validated as."""
    current: list[Any] = [model]
    for step in loc:
        current = [found for c in current for t in _members(c) for found in _step(t, step)]
        if not current:
            return []
    names = {name for c in current for t in _members(c) if _is_model(t) for name in t.model_fields}
    return sorted(names)


def _model_named(base: type[BaseModel], name: str) -> type[BaseModel] | None:
    pending = [base]
    while pending:
        cls = pending.pop()
        if cls.__name__ == name:
            return cls
        pending.extend(cls.__subclasses__())
    return None


def did_you_mean(base: type[BaseModel], title: str, loc: tuple) -> str:
    """'; did you mean X?' for the unknown key at the end of `loc`, or '' without a hint.

    `title` is the validated model's name (pydantic's ValidationError.title), found among
    the subclasses of `base`.
    """
    model = _model_named(base, title)
    if model is None or not loc or not isinstance(loc[-1], str):
        return ""
    valid = keys_at(model, tuple(loc[:-1]))
    if not valid:
        return ""
    close = difflib.get_close_matches(loc[-1], valid, n=3, cutoff=0.6)
    if close:
        return f"; did you mean {' or '.join(close)}?"
    if len(valid) <= _LIST_UNDER:
        return f"; the keys there are {', '.join(valid)}"
    return ""
