"""Collections of young objects paced to a replay's allocations, for the length of a simulation.

CPython collects its youngest generation after every 700 net container allocations, and a
collection visits every element of every young container. A replay keeps making block lists of
hundreds to thousands of ids (a request's blocks, a free's run, the part of a run a take cuts),
so those visits were about a tenth of row 5d's CPU (1.0-1.2 s of 8.9-9.8 s, 320 young
collections) and more than a twentieth of row 5's. The simulation makes almost no cyclic garbage
(a whole Mooncake replay: a few hundred objects), so collecting young objects every 100,000
allocations instead keeps memory bounded as before, and nothing a run outputs depends on when
cycles are freed. The thresholds are the process's again when the simulation returns.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager

YOUNG_THRESHOLD = 100_000


@contextmanager
def young_collections_paced():
    """Within: the youngest generation is collected every YOUNG_THRESHOLD allocations (or
    less often, if the process asked for that); the older generations' thresholds as they were."""
    before = gc.get_threshold()
    if before[0] and before[0] < YOUNG_THRESHOLD:   # (0: the process turned collection off)
        gc.set_threshold(YOUNG_THRESHOLD, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
