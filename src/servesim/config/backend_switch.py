"""Carrying each role's scheduler keys over when an override changes `engine.backend`.

`--set engine.backend=sglang` on a config written for vLLM keeps what its scheduler keys
ask for, under the new engine's names (docs/config.md, "Changing engine.backend"):

- a key with an exact counterpart is carried over, converted where the units differ:
  vLLM's `num_gpu_blocks` (blocks of `block_size`) is `blocks × block_size` tokens of
  SGLang's `max_total_tokens` or TensorRT-LLM's `max_tokens` (the same pool of GPU memory),
  and back `tokens // block_size` blocks; booleans that one engine spells as a
  `disable_…` flag are inverted; SGLang's `chunked_prefill_size` is both vLLM's
  `max_num_batched_tokens` and, as -1, `enable_chunked_prefill: false`;
- a null (the engine's own default) is dropped, so the new engine's default applies;
- a key without a counterpart is dropped when it holds its engine's default (it asks for
  nothing), and otherwise the switch is refused in one sentence naming the keys to remove.

Keys the overrides set themselves are the new engine's and are kept as given.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from servesim.config import error_sentence
from servesim.engine.registry import BACKENDS
from servesim.errors import ServesimError

# Each engine reads its keys as neutral concepts and writes them back under its own names
# (its Backend's carry_reads, carry_writes and carry_write_extra): seqs (requests per batch),
# budget (tokens per pass), chunked (chunked prefill on), block (KV block tokens), kv_tokens
# (KV pool size in tokens), context (longest sequence), prefix (prefix caching on), overlap
# (async scheduling).


def carry_schedulers(data: dict, old: str, new: str, log, source: str) -> None:
    """Rewrite every role's file-written scheduler keys from backend `old` to backend `new` (in place)."""
    if old not in BACKENDS or new not in BACKENDS:
        return   # an unknown backend is reported by validation
    old_backend, new_backend = BACKENDS[old], BACKENDS[new]
    workers = (data.get("engine") or {}).get("workers")
    if not isinstance(workers, dict) or log.covers("engine.workers"):
        return
    label = log.label_of("engine.backend") or "--set engine.backend"
    for role, role_cfg in workers.items():
        where = f"engine.workers.{role}.scheduler"
        sched = role_cfg.get("scheduler") if isinstance(role_cfg, dict) else None
        if not isinstance(sched, dict) or log.covers(where):
            continue
        written = {k: v for k, v in sched.items() if not log.covers(f"{where}.{k}")}
        if any(k not in old_backend.schema.model_fields for k in written):
            continue   # not a config for the old backend: validation names the stray key
        concepts, origin, refused = _read(old, written, where, source)
        kept = {k: v for k, v in sched.items() if k not in written}
        converted, unconvertible = _write(new, concepts, origin, kept)
        refused += unconvertible
        if refused:
            names = ", ".join(f"{where}.{key}" for key in refused)
            raise ServesimError(
                f"{label}: {new_backend.label} has no counterpart of the {old_backend.label} "
                f"setting{'s' if len(refused) > 1 else ''} {names} in {source}; remove "
                f"{'them' if len(refused) > 1 else 'it'} to switch engine.backend to {new}"
            )
        for key in converted:
            log.carried[f"{where}.{key}"] = label
        role_cfg["scheduler"] = {**converted, **kept}


def _read(old: str, written: dict, where: str, source: str) -> tuple[dict, dict, list[str]]:
    """The concepts the file's keys ask for, the key each came from, and the keys without one."""
    schema = BACKENDS[old].schema
    try:
        model = schema.model_validate(written)
    except ValidationError as err:
        raise ServesimError(error_sentence(err, written, source, prefix=where)) from None
    concepts: dict[str, Any] = {}
    origin: dict[str, str] = {}
    refused: list[str] = []
    for key in written:
        value = getattr(model, key)
        if value is None:
            continue   # the old engine's default: the new engine's own applies
        reader = BACKENDS[old].carry_reads.get(key)
        if reader is None:
            if value != schema.model_fields[key].default:
                refused.append(key)
            continue
        for concept, converted in reader(value, model).items():
            concepts[concept] = converted
            origin.setdefault(concept, key)
    return concepts, origin, refused


def _write(new: str, concepts: dict, origin: dict, kept: dict) -> tuple[dict, list[str]]:
    """The new engine's keys for `concepts` (not overriding `kept`), and old keys left unconvertible."""
    backend = BACKENDS[new]
    names = backend.carry_writes
    out: dict[str, Any] = {}
    for concept, value in concepts.items():
        if concept in names:
            key, convert = names[concept]
            out[key] = convert(value)
    refused = backend.carry_write_extra(concepts, origin, kept, out)
    return {k: v for k, v in out.items() if k not in kept}, refused
