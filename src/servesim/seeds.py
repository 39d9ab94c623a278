"""Every random choice in a run derives from the root seed and a named purpose.

Two purposes never share a stream, and adding a new purpose never shifts an
existing one, so a run's synthetic lengths stay the same when, say, a router
starts drawing random numbers too.
"""

from __future__ import annotations

import zlib

import numpy as np


def rng_for(root_seed: int, purpose: str) -> np.random.Generator:
    """A generator for one purpose ("synthetic", "poisson", ...) under `root_seed`."""
    key = zlib.crc32(purpose.encode())
    return np.random.default_rng(np.random.SeedSequence(entropy=root_seed, spawn_key=(key,)))
