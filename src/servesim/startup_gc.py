"""The cyclic garbage collector paused while a process starts, and its start-up objects frozen.

Importing numpy, pydantic and servesim and building the config schema make some 40,000
objects that live as long as the process (as do a run's config and trace). With the collector on, every young-generation
collection during start-up traverses the newest of them again, and every full collection
traverses all of them: about 2.5% of the instructions of a 2,000-request `servesim run`, and
a full collection now and then in each sweep trial. So the entry points pause the collector
(`pause`) and the first simulation, once it has loaded its config and trace and before it builds
its cluster, moves everything made so far into the permanent generation (`gc.freeze`) and turns
the collector back on (`resume`). The cluster stays out of the freeze: a simulation holds cycles
(its workers point back at it), and a sweep worker must be able to free each trial's. What is
simulated is not changed: only when unreachable cycles are freed, and the start-up leaves few.
"""

from __future__ import annotations

import gc

_paused = False   # the collector is off because `pause` turned it off (not the embedding program)
_frozen = False   # the freeze is done: once a process (a program calling the CLI in-process
                  # again and again would otherwise freeze its garbage of each call)


def pause() -> None:
    """Turn the collector off for start-up, unless it is off already (the caller's choice) or
    this process has frozen its start-up already."""
    global _paused
    if gc.isenabled() and not _frozen:
        gc.disable()
        _paused = True


def resume(freeze: bool = True) -> None:
    """After start-up: freeze what exists (never traversed again) and turn the collector on.
    Does nothing unless `pause` turned it off."""
    global _paused, _frozen
    if not _paused:
        return
    _paused = False
    if freeze:
        gc.freeze()
        _frozen = True
    gc.enable()
