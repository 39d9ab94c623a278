"""Decode runs under prefill/decode disaggregation held to the reference engine.

Long decodes on several decode workers, where the fast engine's runs meet transfers to other
workers, handoffs and back-pressure (cluster/disaggregation.py's horizon).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.equivalence import assert_same
from tests.support.runs import write_trace
from tests.test_fast_engine import TIMINGS, _config, steady_scenarios


def _pd(config, prefill: int, decode: int, transfer: dict, policy: str = "round_robin") -> dict:
    sched = config["engine"]["workers"]["aggregated"]["scheduler"]
    config["engine"]["workers"] = {"prefill": {"count": prefill, "scheduler": dict(sched)},
                                   "decode": {"count": decode, "scheduler": dict(sched)}}
    config["engine"]["kv_transfer"] = transfer
    config["router"] = {"policy": policy}
    return config


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steady_scenarios(), TIMINGS, st.data())
def test_decode_runs_match_the_reference_disaggregated(tmp_path, scenario, timing, data):
    """Long decodes on 1-2 prefill and 2-3 decode workers: runs past finishes, transfers to
    other workers inside a run, back-pressure from small decode pools."""
    rows, sched, client, trace_block_size = scenario
    trace = write_trace(tmp_path / "t.jsonl", rows)
    config = _config(trace, sched, client, trace_block_size, timing)
    latency_ms, bandwidth_gb_s = data.draw(st.sampled_from([(0.5, 50.0), (17.0, 1.0), (55.0, 0.01)]))
    transfer = {"bandwidth_gb_s": bandwidth_gb_s, "latency_ms": latency_ms,
                "first_token_from": data.draw(st.sampled_from(["prefill", "decode"]))}
    assert_same(_pd(config, data.draw(st.sampled_from([1, 2])), data.draw(st.sampled_from([2, 3])), transfer,
                    data.draw(st.sampled_from(["round_robin", "kv_aware"]))))
