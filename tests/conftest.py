"""Pytest's shared setup: the hypothesis profile and the `run` fixture (the helpers are in tests/support/)."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from tests.support.runs import run_rows

# The default suite draws the same examples on every run, so CI passes or fails on the
# code alone. SERVESIM_HYPOTHESIS=explore draws fresh ones (as many as each test asks for)
# to hunt for new failures; run it several times. It found the last horizon bug.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("SERVESIM_HYPOTHESIS", "ci"))


@pytest.fixture
def run(tmp_path):
    def _run(rows, **kwargs):
        return run_rows(tmp_path, rows, **kwargs)
    return _run
