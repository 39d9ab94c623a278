"""The fast engine against the reference on one config: the same records, summary or refusal."""

from __future__ import annotations

import copy

import servesim
from servesim.errors import ServesimError


def _simulate_or_refuse(config):
    try:
        return servesim.simulate(config), None
    except ServesimError as err:
        return None, str(err)


def assert_same(config):
    """Identical records and summaries; or, when the reference refuses the run (a deadlock the
    engine would hit too), the same refusal."""
    reference, refused = _simulate_or_refuse(dict(copy.deepcopy(config), engine=dict(config["engine"], reference=True)))
    if refused is not None:
        assert _simulate_or_refuse(config)[1] == refused
        return None
    fast = servesim.simulate(config)
    assert fast.requests == reference.requests
    a = {k: v for k, v in fast.summary.items() if k != "wall_time_ms"}
    b = {k: v for k, v in reference.summary.items() if k not in ("wall_time_ms",)}
    b["config_hash"] = a["config_hash"]  # the configs differ only in engine.reference
    b["simulated"] = dict(b["simulated"], engine=a["simulated"]["engine"],  # which names the engine that ran
                          engine_reason=a["simulated"]["engine_reason"],
                          roles={name: dict(role, engine=a["simulated"]["roles"][name]["engine"])
                                 for name, role in b["simulated"]["roles"].items()})
    # KV-usage samples are taken per pass record, and a fast-forwarded run is one record.
    for workers in (a["workers"], b["workers"]):
        for w in workers:
            del w["kv_timeline"], w["kv_utilization_mean"]
    assert a == b
    return fast
