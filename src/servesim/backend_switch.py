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

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from servesim.config import _BACKEND_LABEL, SCHEDULER_SCHEMAS, _error_sentence
from servesim.errors import ServesimError

Reader = Callable[[Any, Any], dict[str, Any]]   # (value, validated old scheduler) → concepts


def _as(concept: str) -> Reader:
    return lambda value, _: {concept: value}


def _as_not(concept: str) -> Reader:
    return lambda value, _: {concept: not value}


# Each engine's keys as neutral concepts: seqs (requests per batch), budget (tokens per
# pass), chunked (chunked prefill on), block (KV block tokens), kv_tokens (KV pool size in
# tokens), context (longest sequence), prefix (prefix caching on), overlap (async scheduling).
_READ: dict[str, dict[str, Reader]] = {
    "vllm": {
        "max_num_seqs": _as("seqs"), "max_num_batched_tokens": _as("budget"),
        "enable_chunked_prefill": _as("chunked"), "block_size": _as("block"),
        "num_gpu_blocks": lambda value, old: {"kv_tokens": value * old.block_size},
        "max_model_len": _as("context"), "enable_prefix_caching": _as("prefix"),
        "async_scheduling": _as("overlap"),
    },
    "sglang": {
        "max_running_requests": _as("seqs"),
        "chunked_prefill_size": lambda value, _: {"chunked": False} if value == -1 else
        {"budget": value, "chunked": True},
        "page_size": _as("block"), "max_total_tokens": _as("kv_tokens"), "context_length": _as("context"),
        "disable_radix_cache": _as_not("prefix"), "disable_overlap_schedule": _as_not("overlap"),
    },
    "trtllm": {
        "max_batch_size": _as("seqs"), "max_num_tokens": _as("budget"),
        "enable_chunked_context": _as("chunked"), "tokens_per_block": _as("block"),
        "max_tokens": _as("kv_tokens"), "max_seq_len": _as("context"),
        "enable_block_reuse": _as("prefix"), "disable_overlap_scheduler": _as_not("overlap"),
    },
}

# Concept → (the new engine's key, conversion); kv_tokens and chunked are handled in _write.
_WRITE: dict[str, dict[str, tuple[str, Callable[[Any], Any]]]] = {
    "vllm": {"seqs": ("max_num_seqs", int), "budget": ("max_num_batched_tokens", int),
             "chunked": ("enable_chunked_prefill", bool), "block": ("block_size", int),
             "context": ("max_model_len", int), "prefix": ("enable_prefix_caching", bool),
             "overlap": ("async_scheduling", bool)},
    "sglang": {"seqs": ("max_running_requests", int), "budget": ("chunked_prefill_size", int),
               "block": ("page_size", int), "kv_tokens": ("max_total_tokens", int),
               "context": ("context_length", int), "prefix": ("disable_radix_cache", lambda v: not v),
               "overlap": ("disable_overlap_schedule", lambda v: not v)},
    "trtllm": {"seqs": ("max_batch_size", int), "budget": ("max_num_tokens", int),
               "chunked": ("enable_chunked_context", bool), "block": ("tokens_per_block", int),
               "kv_tokens": ("max_tokens", int), "context": ("max_seq_len", int),
               "prefix": ("enable_block_reuse", bool), "overlap": ("disable_overlap_scheduler", lambda v: not v)},
}


def carry_schedulers(data: dict, old: str, new: str, log, source: str) -> None:
    """Rewrite every role's file-written scheduler keys from backend `old` to backend `new` (in place)."""
    if old not in SCHEDULER_SCHEMAS or new not in SCHEDULER_SCHEMAS:
        return   # an unknown backend is reported by validation
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
        if any(k not in SCHEDULER_SCHEMAS[old].model_fields for k in written):
            continue   # not a config for the old backend: validation names the stray key
        concepts, origin, refused = _read(old, written, where, source)
        kept = {k: v for k, v in sched.items() if k not in written}
        converted, unconvertible = _write(new, concepts, origin, kept)
        refused += unconvertible
        if refused:
            names = ", ".join(f"{where}.{key}" for key in refused)
            raise ServesimError(
                f"{label}: {_BACKEND_LABEL[new]} has no counterpart of the {_BACKEND_LABEL[old]} "
                f"setting{'s' if len(refused) > 1 else ''} {names} in {source}; remove "
                f"{'them' if len(refused) > 1 else 'it'} to switch engine.backend to {new}"
            )
        for key in converted:
            log.carried[f"{where}.{key}"] = label
        role_cfg["scheduler"] = {**converted, **kept}


def _read(old: str, written: dict, where: str, source: str) -> tuple[dict, dict, list[str]]:
    """The concepts the file's keys ask for, the key each came from, and the keys without one."""
    schema = SCHEDULER_SCHEMAS[old]
    try:
        model = schema.model_validate(written)
    except ValidationError as err:
        raise ServesimError(_error_sentence(err, written, source, prefix=where)) from None
    concepts: dict[str, Any] = {}
    origin: dict[str, str] = {}
    refused: list[str] = []
    for key in written:
        value = getattr(model, key)
        if value is None:
            continue   # the old engine's default: the new engine's own applies
        reader = _READ[old].get(key)
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
    names = _WRITE[new]
    out: dict[str, Any] = {}
    refused: list[str] = []
    for concept, value in concepts.items():
        if concept in names:
            key, convert = names[concept]
            out[key] = convert(value)
    if new == "sglang" and concepts.get("chunked") is False:
        # SGLang spells "no chunking" as chunked_prefill_size -1, leaving no key for a budget.
        if "budget" in concepts:
            refused.append(origin["budget"])
        out["chunked_prefill_size"] = -1
    if new == "vllm" and "kv_tokens" in concepts:
        default_block = SCHEDULER_SCHEMAS["vllm"].model_fields["block_size"].default
        block = kept.get("block_size", out.get("block_size", default_block))
        if isinstance(block, int) and not isinstance(block, bool) and block > 0:
            out["num_gpu_blocks"] = concepts["kv_tokens"] // block
    return {k: v for k, v in out.items() if k not in kept}, refused
