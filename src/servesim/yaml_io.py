"""YAML 1.2 core-schema loading on top of PyYAML.

PyYAML implements YAML 1.1, where `on`, `yes`, `off` are booleans, `010` is
octal and `1e3` is a string. servesim's config promises YAML 1.2 scalars:
only true/false are booleans, so `async_scheduling: on` reaches validation as
the string "on" and is rejected there. Duplicate mapping keys are an error
rather than a silent overwrite.

Documents are bounded before anything walks them (validation, deep copies): keys must be
plain values (`? [a]: 1` is refused), nesting at most `MAX_DEPTH` levels, and the document
at most `MAX_VALUES` values once aliases are expanded (an alias counts as a copy of its
anchor, so a "billion laughs" document is refused in a few milliseconds). A file may start
with a UTF-8 byte-order mark, which is dropped; any other non-UTF-8 byte is an error.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import yaml

from servesim.errors import ServesimError

_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")
_INT = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)


class _Yaml12Loader(yaml.SafeLoader):
    """SafeLoader with the YAML 1.2 core schema's implicit scalar types."""


# Drop every YAML 1.1 implicit resolver for plain scalars, then add 1.2's.
_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in {
        "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int",
        "tag:yaml.org,2002:float", "tag:yaml.org,2002:null",
        "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:value",
    }]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver("tag:yaml.org,2002:bool", _BOOL, list("tTfF"))
_Yaml12Loader.add_implicit_resolver("tag:yaml.org,2002:null", _NULL, ["~", "n", "N", ""])
_Yaml12Loader.add_implicit_resolver("tag:yaml.org,2002:int", _INT, list("-+0123456789"))
_Yaml12Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def _construct_bool(loader: yaml.SafeLoader, node: yaml.Node) -> bool:
    return loader.construct_scalar(node).lower() == "true"


def _construct_int(loader: yaml.SafeLoader, node: yaml.Node) -> int:
    text = loader.construct_scalar(node)
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text)


def _construct_float(loader: yaml.SafeLoader, node: yaml.Node) -> float:
    text = loader.construct_scalar(node).lower()
    if text.endswith("inf"):
        return -math.inf if text.startswith("-") else math.inf
    if text.endswith("nan"):
        return math.nan
    return float(text)


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    mapping: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise ServesimError(f"the key at line {key_node.start_mark.line + 1} is a "
                                f"{'list' if isinstance(key, list) else 'mapping'}; keys must be plain "
                                "names or numbers") from None
        if key in mapping:
            raise ServesimError(
                f"duplicate key {key!r} at line {key_node.start_mark.line + 1}"
            )
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_Yaml12Loader.add_constructor("tag:yaml.org,2002:bool", _construct_bool)
_Yaml12Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_Yaml12Loader.add_constructor("tag:yaml.org,2002:float", _construct_float)
_Yaml12Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


MAX_DEPTH = 64            # nested mappings/lists; real configs use under 10
MAX_VALUES = 1_000_000    # values in the document with every alias expanded


def check_size(data: Any, source: str) -> None:
    """Refuse data nested deeper than MAX_DEPTH or holding more than MAX_VALUES values.

    Walks iteratively and visits a shared (aliased) node once per reference, stopping as
    soon as a limit is passed, so the cost is bounded however large the expansion.
    """
    stack = [(data, 1)]
    seen = 0
    while stack:
        node, depth = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise ServesimError(f"{source}: the document expands to more than {MAX_VALUES:,} values "
                                "(aliases repeating aliases?); servesim reads at most that many")
        if isinstance(node, dict):
            children = [*node.keys(), *node.values()]
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth >= MAX_DEPTH and children:
            raise ServesimError(f"{source}: mappings and lists are nested more than {MAX_DEPTH} levels deep")
        stack.extend((child, depth + 1) for child in children)


def read_text(path: Path, what: str) -> str:
    """A UTF-8 text file's contents (a leading byte-order mark dropped); errors name `what` and the path."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ServesimError(f"{what} {path} does not exist") from None
    except IsADirectoryError:
        raise ServesimError(f"{what} {path} is a folder, not a file") from None
    except OSError as err:
        raise ServesimError(f"cannot read {what} {path}: {err.strerror or err}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise ServesimError(f"{what} {path} is not UTF-8 text (byte {data[err.start]:#04x} on line {line}); "
                            "save it as UTF-8") from None


def load_yaml(text: str, source: str) -> Any:
    """Parse YAML text; `source` names it in error messages."""
    try:
        data = yaml.load(text, Loader=_Yaml12Loader)  # noqa: S506 - a SafeLoader subclass
    except ServesimError as err:
        raise ServesimError(f"{source}: {err}") from None
    except RecursionError:
        raise ServesimError(f"{source}: mappings and lists are nested more than {MAX_DEPTH} levels deep") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ServesimError(f"{source}{where}: invalid YAML ({problem})") from None
    check_size(data, source)
    return data


def dump_yaml(data: Any) -> str:
    """Dump plain data as block-style YAML that `load_yaml` reads back unchanged."""
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)
