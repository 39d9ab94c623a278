"""Dynamo's SLA planner (cluster/planner.py): a hand-checked step in load on a P/D fleet, the
aggregated extension's arithmetic, and properties over random fleets it scales."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tests.support.runs import run_rows
from tests.test_autoscaling_pd import _served_once_and_drained
from tests.test_disaggregation import _pd

# Every pass lasts 10 ms + 1 ms per request in it: a decode batch of n has an ITL of (10 + n) ms,
# one prompt alone (within the token budget) a TTFT of 11 ms.
TIMING = {"kind": "polynomial", "base_ms": 10, "per_prefill_token_ms": 0, "per_decode_token_ms": 0,
          "per_context_token_ms": 0, "per_request_ms": 1}
PLANNER = {"policy": "sla_planner", "adjustment_interval_s": 2, "itl_s": 0.02, "max_replicas": 4,
           "load_bandwidth_gb_s": 8, "startup_s": 0.5}


def test_a_step_in_load_scales_the_decode_pool(tmp_path):
    # 4 requests at 0 (16-token prompts, 50 tokens), 40 at 2 s and 4 at 7 s (30 tokens), each
    # finishing within its interval: [0, 0.718), [2, 3.554), [7, 7.378) s.
    rows = [{"timestamp": 0, "input_length": 16, "output_length": 50} for _ in range(4)]
    rows += [{"timestamp": 2000, "input_length": 16, "output_length": 30} for _ in range(40)]
    rows += [{"timestamp": 7000, "input_length": 16, "output_length": 30} for _ in range(4)]
    extra = _pd()
    extra["engine.workers"]["prefill"]["autoscaling"] = PLANNER
    extra["engine.workers"]["decode"]["autoscaling"] = PLANNER
    extra["engine.timing"] = TIMING
    r = run_rows(tmp_path, rows, config_extra=extra)
    scaled = r.result.summary["autoscaling"]
    prefill, decode = scaled["prefill"], scaled["decode"]
    # Profiles from the timing model. Prefill: 16 tokens in one 11 ms pass: 16 / 0.011 =
    # 1454.54 tokens/s per GPU. Decode at context 16 + osl / 2 (41, then 31): the KV holds
    # 999 × 16 = 15,984 tokens, max_num_seqs 64; searched down from 64, the first batch n with
    # (10 + n) ms within the (corrected) ITL target; n / ITL tokens/s per GPU.
    # Correction (Dynamo's default): the decode factor is the observed ITL over the profile's
    # at the engines' mean concurrency n_req / ready × mean duration / interval; the target
    # becomes 20 ms / factor. The prefill factor (observed TTFT / 11 ms) is above 1: no effect.
    # 2 s: 4 done, osl 50, each 49 gaps of 14 ms: concurrency 4 × 0.718 / 2 = 1.44 → 1, whose
    #      ITL is 11 ms: factor 14 / 11, target 15.71 ms: n = 5, 5 / 0.015 = 333.3 tokens/s;
    #      decode 4 × 50 / 2 = 100 tokens/s → 0.3 → 1. Prefill 4 × 16 / 2 = 32 → 0.022 → 1.
    # 4 s: 40 done, osl 30, gaps of 50 ms: concurrency 40 × 1.554 / 2 = 31.1 → 31 (41 ms):
    #      factor 50 / 41, target 16.4 ms: n = 6, 375 tokens/s; 40 × 30 / 2 = 600 → 1.6 → 2:
    #      decode-1 provisions, ready at 4 + 2.507498752 s. Prefill 320 tokens/s → 0.22 → 1.
    # 6 s: nothing finished since 4 s: the adjustment is skipped (2 stays).
    # 8 s: 4 done on two ready replicas, gaps of 12 ms: concurrency 4 / 2 × 0.378 / 2 → 1
    #      (11 ms): factor 12 / 11, target 18.33 ms: n = 8, 444.4 tokens/s; 60 → 0.135 → 1:
    #      decode-1, the newest, drains (empty: it goes).
    adjustments = decode["adjustments"]
    assert [(a["time_s"], a["num_req"], a["osl"], a["decode_tokens_s"], a["decode_concurrency"], a["replicas"])
            for a in adjustments] == [(2.0, 4, 50.0, 100.0, 5, 1), (4.0, 40, 30.0, 600.0, 6, 2),
                                      (8.0, 4, 30.0, 60.0, 8, 1)]
    assert [a["itl_s"] for a in adjustments] == pytest.approx([0.014, 0.05, 0.012], rel=1e-12)
    assert [a["d_correction"] for a in adjustments] == pytest.approx([14 / 11, 50 / 41, 12 / 11], rel=1e-12)
    assert [a["decode_thpt_per_gpu"] for a in adjustments] == pytest.approx([5 / 0.015, 6 / 0.016, 8 / 0.018],
                                                                             rel=1e-12)
    assert [a["replicas_needed"] for a in adjustments] == pytest.approx([0.3, 1.6, 0.135], rel=1e-12)
    assert [(a["prefill_tokens_s"], a["profile_ttft_s"], a["replicas"]) for a in prefill["adjustments"]] == [
        (32.0, 0.011, 1), (320.0, 0.011, 1), (32.0, 0.011, 1)]
    assert prefill["adjustments"][0]["prefill_thpt_per_gpu"] == pytest.approx(16 / 0.011, rel=1e-12)
    assert prefill["adjustments"][0]["p_correction"] == pytest.approx(0.032097152 / 0.011, rel=1e-12)
    assert [row[:3] + row[4:] for row in decode["timeline"]] == [[2.0, 1, 1, 1], [4.0, 1, 1, 2], [6.0, 2, 1, 2],
                                                                 [8.0, 2, 2, 1]]
    # The average: the load per ready replica; none where the adjustment was skipped.
    averages = [row[3] for row in decode["timeline"]]
    assert averages[2] is None and averages[:2] + averages[3:] == pytest.approx([0.3, 1.6, 0.0675], rel=1e-12)
    assert decode["changes"] == [[4.0, "decode-1", "provisioning"], [6.507498752, "decode-1", "ready"],
                                 [8.0, "decode-1", "draining"], [8.0, "decode-1", "removed"]]
    assert prefill["changes"] == [] and decode["policy"] == "sla_planner"
    by_id = r.by_id
    # The 40 at 2 s: prefilled in one pass of 10 + 40 ms, sent in 4.097152 ms, decoded on
    # decode-0 (the only one) in passes of 50 ms: first token 2.104097152, last 1.5 s later.
    assert (by_id[4].worker, by_id[4].first_token_ns, by_id[4].finish_ns) == (
        "decode-0", 2_104_097_152, 3_554_097_152)
    # The 4 at 7 s: decode-1 is ready and takes two of them: passes of 12 ms from 7.018097152.
    assert [by_id[i].worker for i in range(44, 48)] == ["decode-0", "decode-1", "decode-0", "decode-1"]
    assert (by_id[47].first_token_ns, by_id[47].finish_ns) == (7_030_097_152, 7_378_097_152)
    # Decode replica-seconds in the window [0, 7.378097152]: 7.378097152 + 3.378097152.
    assert decode["gpu_hours"] == pytest.approx(10.756194304 / 3600, rel=1e-12)


def test_an_aggregated_replica_time_shares_prefill_and_decode(tmp_path):
    # Without the correction factors. 20 requests at 0, 100-token prompts, 30 tokens, a
    # token budget of 64: one prompt alone
    # takes 2 passes of 11 ms (TTFT 22 ms): 100 / 0.022 = 4545.45 prefill tokens/s per GPU.
    # At 2 s: prefill 20 × 100 / 2 = 1000 tokens/s → 0.22 of a replica; decode 20 × 30 / 2 = 300
    # tokens/s at 500 per GPU (n = 10: (10 + 10) ms meets 20 ms) → 0.6; together 0.82 → 1.
    rows = [{"timestamp": 0, "input_length": 100, "output_length": 30} for _ in range(20)]
    r = run_rows(tmp_path, rows, max_num_batched_tokens=64, max_num_seqs=16,
                 config_extra={"engine.workers.aggregated.autoscaling": {**PLANNER, "correction": False},
                               "engine.timing": TIMING})
    (adjustment,) = r.result.summary["autoscaling"]["aggregated"]["adjustments"]
    assert adjustment["profile_ttft_s"] == 0.022 and adjustment["decode_concurrency"] == 10
    assert adjustment["replicas_needed"] == pytest.approx(1000 / (100 / 0.022) + 300 / 500, rel=1e-12)
    assert adjustment["replicas"] == 1


def test_an_itl_target_no_batch_meets_falls_back_to_one_request(tmp_path):
    # ITL target 5 ms < the 11 ms of a lone decode: Dynamo's search falls back to the lowest
    # load: 1 / 0.011 = 90.9 tokens/s per GPU. 4 × 50 / 2 = 100 → 1.1 → 2 replicas.
    rows = [{"timestamp": 0, "input_length": 16, "output_length": 50} for _ in range(4)]
    extra = _pd()
    extra["engine.workers"]["decode"]["autoscaling"] = {**PLANNER, "itl_s": 0.005, "correction": False}
    extra["engine.timing"] = TIMING
    decode = run_rows(tmp_path, rows, config_extra=extra).result.summary["autoscaling"]["decode"]
    first = decode["adjustments"][0]
    assert first["decode_concurrency"] == 1 and first["replicas"] == 2
    assert first["decode_thpt_per_gpu"] == pytest.approx(1 / 0.011, rel=1e-12)


@settings(max_examples=10, deadline=None, derandomize=True)
@given(rows=st.lists(st.tuples(st.integers(0, 4000), st.integers(1, 60), st.integers(1, 120)), min_size=1,
                     max_size=25),
       counts=st.tuples(st.integers(1, 2), st.integers(1, 2)), extra=st.integers(0, 2),
       scaled=st.sampled_from([("prefill",), ("decode",), ("prefill", "decode")]),
       itl_ms=st.sampled_from([5, 12, 30]),
       policy=st.sampled_from(["round_robin", "least_outstanding", "kv_aware"]))
def test_planned_fleets_serve_every_request_once_and_count_gpu_hours(tmp_path_factory, rows, counts, extra,
                                                                    scaled, itl_ms, policy):
    trace = [{"timestamp": t, "input_length": n, "output_length": m} for t, n, m in sorted(rows)]
    counts = dict(zip(("prefill", "decode"), counts))
    config = _pd(sched={"max_num_seqs": 4, "num_gpu_blocks": 64, "max_model_len": 256})
    for role in ("prefill", "decode"):
        config["engine.workers"][role]["count"] = counts[role]
    for role in scaled:
        config["engine.workers"][role]["autoscaling"] = {
            "policy": "sla_planner", "adjustment_interval_s": 0.3, "itl_s": itl_ms / 1000,
            "max_replicas": counts[role] + extra, "load_bandwidth_gb_s": 100, "startup_s": 0.1}
    config["router.policy"] = policy
    config["engine.timing"] = TIMING
    r = run_rows(tmp_path_factory.mktemp("planner"), trace, config_extra=config)
    _served_once_and_drained(trace, r, counts)


def test_each_planned_pool_gets_its_own_plot(tmp_path):
    from servesim.metrics.plots import plot_run, run_plot_names

    rows = [{"timestamp": 0, "input_length": 16, "output_length": 50} for _ in range(4)]
    rows += [{"timestamp": 2000, "input_length": 16, "output_length": 30} for _ in range(40)]
    extra = _pd()
    extra["engine.workers"]["prefill"]["autoscaling"] = PLANNER
    extra["engine.workers"]["decode"]["autoscaling"] = PLANNER
    extra["engine.timing"] = TIMING
    result = run_rows(tmp_path, rows, config_extra=extra).result
    names = run_plot_names(result)
    assert names[2:4] == ["autoscaling_prefill.png", "autoscaling_decode.png"]
    data = plot_run(result, {name: tmp_path / name for name in names})
    decode = data["autoscaling_decode.png"]
    # Adjustments at 2 s and 4 s; at 6 s and 8 s (decode-1 came up at 6.507 s) nothing had
    # finished: skipped, no average.
    assert decode["applied"].tolist() == [1, 2, 2, 2] and decode["average"][:2].tolist() == pytest.approx([0.3, 1.6])
    assert np.isnan(decode["average"][2:]).all()
    assert (tmp_path / "autoscaling_decode.png").stat().st_size > 0


@settings(max_examples=4, deadline=None, derandomize=True)
@given(rows=st.lists(st.tuples(st.integers(0, 3000), st.integers(1, 200), st.integers(2, 300)), min_size=5,
                     max_size=30),
       policy=st.sampled_from(["round_robin", "least_outstanding", "kv_aware"]))
def test_fast_and_reference_engines_plan_alike(tmp_path_factory, rows, policy):
    # The adjustments bound the fast engine's fast-forwarded runs; completions arrive alike.
    trace = [{"timestamp": t, "input_length": n, "output_length": m} for t, n, m in sorted(rows)]
    planner = {"policy": "sla_planner", "adjustment_interval_s": 0.25, "itl_s": 0.015, "max_replicas": 3,
               "load_bandwidth_gb_s": 100, "startup_s": 0.1}
    out = []
    for reference in (False, True):
        r = run_rows(tmp_path_factory.mktemp("planner"), trace, max_num_seqs=4, num_gpu_blocks=128,
                     max_model_len=512, config_extra={"engine.workers.aggregated.autoscaling": planner,
                                                      "router.policy": policy, "engine.reference": reference,
                                                      "engine.timing": TIMING})
        assert r.result.summary["simulated"]["engine"] == ("reference" if reference else "fast")
        out.append((r.result.summary["autoscaling"],
                    [(x.request_id, x.worker, x.first_token_ns, x.finish_ns) for x in r.result.requests]))
    assert out[0] == out[1]
