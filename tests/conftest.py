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


@pytest.fixture(params=["fast", "reference"])
def run(request, tmp_path, monkeypatch):
    """Rows through servesim with a pass log (tests/support/runs.py), once on each engine.

    Each run asserts that the engine it was meant for ran: the summary's engine choice, and
    the schedulers the fleet built (the fast engine's are `Fast...Scheduler`s). A test the
    fast engine cannot run (speculative decoding, KV offload) asks for the reference only:
    `@pytest.mark.parametrize("run", ["reference"], indirect=True)`.
    """
    from servesim.cluster import fleet

    engine = request.param
    built = []
    make_scheduler = fleet.make_scheduler

    def recording_make_scheduler(*args, **kwargs):
        scheduler = make_scheduler(*args, **kwargs)
        built.append(type(scheduler).__name__)
        return scheduler

    monkeypatch.setattr(fleet, "make_scheduler", recording_make_scheduler)

    def _run(rows, **kwargs):
        extra = dict(kwargs.pop("config_extra", None) or {})
        extra["engine.reference"] = engine == "reference"
        built.clear()
        result = run_rows(tmp_path, rows, config_extra=extra, **kwargs)
        assert result.result.summary["simulated"]["engine"] == engine
        assert built and all(name.startswith("Fast") == (engine == "fast") for name in built), built
        return result
    _run.engine = engine
    return _run
