"""simulate() collects young objects less often while it runs (servesim/gc_pace.py), and gives
the process its own thresholds back, also when the run fails."""

from __future__ import annotations

import gc

import pytest

import servesim
from servesim.errors import ServesimError
from servesim.gc_pace import YOUNG_THRESHOLD, young_collections_paced

_SMALL = {"workload": {"synthetic": {"num_requests": 4, "input_length": 32, "output_length": 4}}}


def test_a_run_paces_young_collections_and_restores_the_thresholds():
    before = gc.get_threshold()
    seen = []
    servesim.simulate(_SMALL, progress=lambda *_: seen.append(gc.get_threshold()))
    assert seen and all(threshold[0] == max(before[0], YOUNG_THRESHOLD) for threshold in seen)
    assert all(threshold[1:] == before[1:] for threshold in seen)
    assert gc.get_threshold() == before


def test_a_failed_run_restores_the_thresholds():
    before = gc.get_threshold()
    with pytest.raises(ServesimError):
        servesim.simulate({"workload": {"nonsense": 1}})
    assert gc.get_threshold() == before


def test_a_process_that_collects_less_often_or_never_is_left_so():
    before = gc.get_threshold()
    try:
        for asked in ((10 * YOUNG_THRESHOLD, 10, 10), (0, 10, 10)):
            gc.set_threshold(*asked)
            with young_collections_paced():
                assert gc.get_threshold() == asked
            assert gc.get_threshold() == asked
    finally:
        gc.set_threshold(*before)
