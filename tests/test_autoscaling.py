"""Autoscaling after a Kubernetes HPA (cluster/autoscaler.py): a hand-checked scale-up with its
provisioning delay and a scale-down with draining, and properties over random fleets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tests.support.runs import run_rows

# One replica at start, up to 3; the average requests in each ready engine against a target of 2,
# synced every second; a scale-down waits for the highest recommendation of the last 2.5 s.
# A new replica loads Llama-3.1-8B's 16,059,990,016 bytes of bf16 weights at 8 GB/s
# (2.007498752 s) and starts in 0.5 s: ready 2.507498752 s after it is asked for.
HPA = {"metric": "in_flight", "target": 2, "max_replicas": 3, "sync_period_s": 1,
       "scale_down_stabilization_s": 2.5, "load_bandwidth_gb_s": 8, "startup_s": 0.5}


def _run(tmp_path, rows, hpa=HPA, **extra):
    return run_rows(tmp_path, rows, config_extra={"engine.workers.aggregated.autoscaling": hpa, **extra})


def test_scale_up_pays_the_cold_start_and_scale_down_drains(tmp_path):
    # Fixed 10 ms passes, async scheduling. Eight requests at 0 (300 tokens each) run together
    # on aggregated-0 and finish at 3.0 s. R arrives at 2.005 s, Q at 4.005 s.
    rows = [{"timestamp": 0, "input_length": 16, "output_length": 300} for _ in range(8)]
    rows += [{"timestamp": 2005, "input_length": 16, "output_length": 10},
             {"timestamp": 4005, "input_length": 16, "output_length": 150}]
    r = _run(tmp_path, rows)
    scaled = r.result.summary["autoscaling"]["aggregated"]
    assert scaled["provisioning_s"] == 2.507498752
    # Syncs: [time, live, ready, average, replicas applied].
    # 1 s: 8 in flight on the one ready replica, 8 / 2 = 4 → ceil(1 × 4) = 4, clamped to 3.
    # 2 s: the two new ones still provisioning: the average is the ready replica's, 8: 3 stays.
    # 3 s: the eight finished at the 3.0 s pass end (before the sync): 0 → min 1, but the
    #      window [0.5, 3] holds 3 (1 s, 2 s): 3 stays. 4 s: all three ready, 0; the window
    #      [1.5, 4] still holds 2 s's 3.
    # 5 s: Q in flight on aggregated-1: 1 / 3 → ceil(3 × 1/6) = 1; the window [2.5, 5] holds
    #      only 1s: down to 1. The newest, aggregated-2, is empty and goes at once;
    #      aggregated-1 drains and goes when Q finishes, 5.505 s.
    # 6 s: one replica, nothing in flight: 1 stays; nothing else is left to happen: the end.
    assert scaled["timeline"] == [[1.0, 1, 1, 8.0, 3], [2.0, 3, 1, 8.0, 3], [3.0, 3, 1, 0.0, 3],
                                  [4.0, 3, 3, 0.0, 3], [5.0, 3, 3, 1 / 3, 1], [6.0, 1, 1, 0.0, 1]]
    assert scaled["changes"] == [
        [1.0, "aggregated-1", "provisioning"], [1.0, "aggregated-2", "provisioning"],
        [3.507498752, "aggregated-1", "ready"], [3.507498752, "aggregated-2", "ready"],
        [5.0, "aggregated-2", "draining"], [5.0, "aggregated-2", "removed"],
        [5.0, "aggregated-1", "draining"], [5.505, "aggregated-1", "removed"]]
    by_id = r.by_id
    # R comes during the cold start: only aggregated-0 is ready. Mid-pass under async
    # scheduling it joins the pass after the queued one: [2.02, 2.03) → TTFT 25 ms.
    assert (by_id[8].worker, by_id[8].first_token_ns) == ("aggregated-0", 2_030_000_000)
    # Q goes round robin to aggregated-1 (ready, idle): its pass starts at arrival, TTFT 10 ms.
    assert (by_id[9].worker, by_id[9].first_token_ns, by_id[9].finish_ns) == (
        "aggregated-1", 4_015_000_000, 5_505_000_000)
    # Replica-seconds within the run's window, first arrival (0) to last finish (5.505 s), as
    # a fixed fleet's GPU-hours count: aggregated-0 0-5.505 s, aggregated-1 1-5.505 s,
    # aggregated-2 1-5 s = 14.01 (the syncs go on to 6 s, outside it).
    assert scaled["gpu_hours"] == pytest.approx(14.01 / 3600, rel=1e-12)
    assert r.result.summary["gpu_hours"] == scaled["gpu_hours"] and scaled["peak_replicas"] == 3
    assert [w["worker"] for w in r.result.summary["workers"]] == ["aggregated-0", "aggregated-1", "aggregated-2"]


def test_within_tolerance_nothing_changes(tmp_path):
    # Two requests on one replica against a target of 2 (tolerance 0.1): the ratio is 1.
    rows = [{"timestamp": 0, "input_length": 16, "output_length": 250} for _ in range(2)]
    scaled = _run(tmp_path, rows).result.summary["autoscaling"]["aggregated"]
    assert [row[4] for row in scaled["timeline"]] == [1, 1, 1] and scaled["changes"] == []


def test_fixed_fleets_write_no_autoscaling_key(tmp_path):
    r = run_rows(tmp_path, [{"timestamp": 0, "input_length": 16, "output_length": 2}])
    assert "autoscaling" not in r.result.summary
    assert "autoscaling" not in r.result.config.engine.workers.aggregated.model_dump()


def _integral(scaled, start_replicas: int, start_s: float, end_s: float) -> float:
    """∫ live replicas dt over [start_s, end_s] from the change log: + at provisioning, − at removal."""
    live, last, total = start_replicas, 0.0, 0.0
    for at, _, state in scaled["changes"]:
        if state in ("provisioning", "removed"):
            total += live * max(0.0, min(at, end_s) - max(last, start_s))
            live, last = live + (1 if state == "provisioning" else -1), at
    return total + live * max(0.0, end_s - max(last, start_s))


@settings(max_examples=12, deadline=None, derandomize=True)
@given(rows=st.lists(st.tuples(st.integers(0, 4000), st.integers(1, 60), st.integers(1, 120)), min_size=1,
                     max_size=25),
       count=st.integers(1, 2), extra=st.integers(0, 2),
       metric=st.sampled_from(["in_flight", "queue_length", "kv_utilization"]),
       policy=st.sampled_from(["round_robin", "random", "least_outstanding", "kv_aware", "llm_d"]))
def test_every_request_is_served_once_and_gpu_hours_are_the_integral(tmp_path_factory, rows, count, extra,
                                                                    metric, policy):
    trace = [{"timestamp": t, "input_length": n, "output_length": m} for t, n, m in sorted(rows)]
    target = 0.05 if metric == "kv_utilization" else 1.0
    hpa = {"metric": metric, "target": target, "min_replicas": 1, "max_replicas": count + extra,
           "sync_period_s": 0.25, "scale_down_stabilization_s": 0.5, "load_bandwidth_gb_s": 100, "startup_s": 0.1}
    r = run_rows(tmp_path_factory.mktemp("hpa"), trace, max_num_seqs=4, num_gpu_blocks=64, max_model_len=256,
                 config_extra={"engine.workers.aggregated.autoscaling": hpa,
                               "engine.workers.aggregated.count": count, "router.policy": policy})
    records = r.result.requests
    assert sorted(rec.request_id for rec in records) == list(range(len(trace)))   # each served once
    assert all(rec.finish_ns is not None and rec.output_length == trace[rec.request_id]["output_length"]
               for rec in records)
    summary = r.result.summary
    scaled = summary["autoscaling"]["aggregated"]
    start_s = min(rec.arrival_ns for rec in records) / 1e9   # the summary's window
    end_s = start_s + summary["duration_ms"] / 1e3
    assert scaled["gpu_hours"] == pytest.approx(_integral(scaled, count, start_s, end_s) / 3600, rel=1e-9,
                                                abs=1e-15)
    # Requests only ever went to replicas that were ready when they were routed.
    ready_at = {name: at for at, name, state in scaled["changes"] if state == "ready"}
    for rec in records:
        assert rec.arrival_ns / 1e9 >= ready_at.get(rec.worker, 0.0)
    live = [row[1] for row in scaled["timeline"]]
    assert all(1 <= n <= count + extra for n in live)


@settings(max_examples=4, deadline=None, derandomize=True)
@given(rows=st.lists(st.tuples(st.integers(0, 3000), st.integers(1, 200), st.integers(1, 300)), min_size=5,
                     max_size=30),
       metric=st.sampled_from(["in_flight", "queue_length", "kv_utilization"]),
       policy=st.sampled_from(["round_robin", "least_outstanding", "kv_aware", "llm_d"]))
def test_fast_and_reference_engines_scale_alike(tmp_path_factory, rows, metric, policy):
    # The syncs bound the fast engine's fast-forwarded runs: each reads the same engine state.
    trace = [{"timestamp": t, "input_length": n, "output_length": m} for t, n, m in sorted(rows)]
    hpa = {"metric": metric, "target": 0.05 if metric == "kv_utilization" else 2.0, "max_replicas": 3,
           "sync_period_s": 0.25, "scale_down_stabilization_s": 0.5, "load_bandwidth_gb_s": 100, "startup_s": 0.1}
    out = []
    for reference in (False, True):
        r = run_rows(tmp_path_factory.mktemp("hpa"), trace, max_num_seqs=4, num_gpu_blocks=128, max_model_len=512,
                     config_extra={"engine.workers.aggregated.autoscaling": hpa, "router.policy": policy,
                                   "engine.reference": reference})
        assert r.result.summary["simulated"]["engine"] == ("reference" if reference else "fast")
        out.append((r.result.summary["autoscaling"],
                    [(x.request_id, x.worker, x.first_token_ns, x.finish_ns) for x in r.result.requests]))
    assert out[0] == out[1]


def test_the_plot_draws_the_replicas_the_load_and_the_ttft(tmp_path):
    from servesim.metrics.plots import plot_run, run_plot_names

    rows = [{"timestamp": 0, "input_length": 16, "output_length": 300} for _ in range(8)]
    rows += [{"timestamp": 2005, "input_length": 16, "output_length": 10},
             {"timestamp": 4005, "input_length": 16, "output_length": 150}]
    result = _run(tmp_path, rows).result
    names = run_plot_names(result)
    assert names[:3] == ["ttft_cdf.png", "tpot_cdf.png", "autoscaling_aggregated.png"]
    data = plot_run(result, {name: tmp_path / name for name in names})
    s = data["autoscaling_aggregated.png"]
    assert (tmp_path / "autoscaling_aggregated.png").stat().st_size > 0
    # Live replicas: 1 from 0, 3 from 1 s, 2 at 5.0 s (aggregated-2 removed), 1 at 5.505 s.
    assert s["change_s"].tolist() == [0.0, 1.0, 1.0, 5.0, 5.505] and s["live"].tolist() == [1, 2, 3, 2, 1]
    assert s["applied"].tolist() == [3, 3, 3, 3, 1, 1] and s["ready"].tolist() == [1, 1, 1, 3, 3, 1]
    # TTFT by arrival period (1 s): the eight at 0 s 10 ms each, R (2.005 s) 25 ms, Q (4.005 s) 10 ms.
    ttft = s["mean_ttft_ms"]
    assert ttft[0] == 10.0 and ttft[2] == 25.0 and ttft[4] == 10.0
    assert np.isnan(ttft[1]) and np.isnan(ttft[3])


def test_policy_hpa_names_the_default_block():
    """`policy: hpa` is the HPA block as if the key were absent: same model, same dump."""
    from servesim.config import load_config
    from servesim.config.autoscaling import AutoscalingConfig

    def block(extra):
        cfg = {"engine": {"workers": {"aggregated": {"autoscaling": {
            "metric": "in_flight", "target": 2.0, "max_replicas": 3, **extra}}}},
               "workload": {"synthetic": {"num_requests": 1, "input_length": 8, "output_length": 2}}}
        return load_config(cfg).config.engine.workers.aggregated.autoscaling

    named, bare = block({"policy": "hpa"}), block({})
    assert isinstance(named, AutoscalingConfig) and named.model_dump() == bare.model_dump()
