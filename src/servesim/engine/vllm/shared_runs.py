"""vLLM's rule for sweep trials that compute one run (docs/modeling/shared_runs.md).

Trials alike but for `max_num_seqs` differ in resolved config only there, in `num_gpu_blocks`
(the memory profile counts `max_num_seqs` logits: a lower limit leaves more blocks) and in
`max_cudagraph_capture_size` (a default of `max_num_seqs`). The sweep (sweep/sharing.py) runs
the trial with the highest limit; its run is every sibling's whose limit exceeds the most running
requests any limit check saw, when no KV capacity check failed, no prefix lookup hit, no keyed
block was evicted, and the capture size is not read (a dense model: only MoE layers run eagerly).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from servesim.engine.kv.cache import KvCache

_SEQS = "max_num_seqs"
_KNOBS = (_SEQS, "num_gpu_blocks", "max_cudagraph_capture_size")   # what siblings may differ in


def share_key(config: dict) -> tuple[str, int] | None:
    """(group, rank) of a trial config as given: configs alike but for one max_num_seqs set on
    every role share a group, ranked by that limit; None when a role does not set it."""
    from servesim.sweep.trials import plain_copy

    engine = config.get("engine")
    workers = engine.get("workers") if isinstance(engine, dict) else None
    if not isinstance(workers, dict) or not workers:
        return None
    stripped = plain_copy(config)
    limits = set()
    for role in stripped["engine"]["workers"].values():
        sched = role.get("scheduler") if isinstance(role, dict) else None
        if not isinstance(sched, dict) or type(sched.get(_SEQS)) is not int:
            return None
        limits.add(sched.pop(_SEQS))
    if len(limits) != 1:
        return None
    return json.dumps(stripped, sort_keys=True, default=str), limits.pop()


@dataclass(frozen=True)
class SeqsWitness:
    """A run whose size-dependent checks all passed, and the most running requests each role's
    max_num_seqs checks saw."""

    seqs_peak: dict[str, int]


def run_witness(sim: Any) -> SeqsWitness | None:
    """What the finished simulation proves of its siblings (None: nothing)."""
    from servesim.engine.vllm.scheduler import VllmScheduler

    peaks = {}
    for name, role in sim.roles.items():
        peak = 0
        for worker in role.workers:
            sched = worker.scheduler
            kv = sched.kv
            # The reference cache and a host tier keep no record: they prove nothing.
            if not isinstance(sched, VllmScheduler) or type(kv) is not KvCache or kv.host is not None:
                return None
            if kv.refused or kv.hit or kv.evicted:
                return None
            peak = max(peak, sched.seqs_peak)
        peaks[name] = peak
    return SeqsWitness(peaks)


def run_covers(witnessed: Any, witness: SeqsWitness | None, other: Any) -> bool:
    """Whether `other` (a RunSpec whose config outside the schedulers is `witnessed`'s) computes
    the witnessed run: per role, the schedulers alike but for the knobs, a limit above the peak,
    at least as many blocks past the watermark, the capture size equal or unread."""
    if witness is None or witnessed.roles.keys() != other.roles.keys():
        return False
    for name, role in witnessed.roles.items():
        mine, theirs = role.scheduler, other.roles[name].scheduler
        if _without_knobs(mine) != _without_knobs(theirs):
            return False
        if theirs.max_num_seqs <= witness.seqs_peak[name]:
            return False
        if theirs.num_gpu_blocks < mine.num_gpu_blocks or _past_watermark(theirs) < _past_watermark(mine):
            return False
        if theirs.max_cudagraph_capture_size != mine.max_cudagraph_capture_size and role.deployment.arch.moe_layers:
            return False
    return True


def _without_knobs(sched: Any) -> dict:
    return {key: value for key, value in sched.model_dump().items() if key not in _KNOBS}


def _past_watermark(sched: Any) -> int:
    """Blocks free to admit into once the watermark is kept (engine/vllm/backend.py's count)."""
    return sched.num_gpu_blocks - int(sched.watermark * sched.num_gpu_blocks)
