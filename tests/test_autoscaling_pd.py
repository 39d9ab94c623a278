"""Autoscaling the pools of a P/D fleet (cluster/autoscaler.py per role): a hand-checked scale-up
of the decode pool, and properties over random P/D fleets with either pool or both autoscaled."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from tests.support.runs import run_rows
from tests.test_autoscaling import _integral
from tests.test_disaggregation import _pd

# Synced every second against 2 requests in each decode engine, up to 2 replicas; a scale-down
# waits for the highest recommendation of the last 1.5 s. A new replica is ready 2.507498752 s
# after it is asked for (Llama-3.1-8B's 16,059,990,016 bytes at 8 GB/s, then 0.5 s).
HPA = {"metric": "in_flight", "target": 2, "max_replicas": 2, "sync_period_s": 1,
       "scale_down_stabilization_s": 1.5, "load_bandwidth_gb_s": 8, "startup_s": 0.5}


def test_decode_pool_scales_up_after_its_cold_start_and_drains(tmp_path):
    # Fixed 10 ms passes, async scheduling off; a 16-token prompt's KV is 2,097,152 bytes:
    # 2.097152 ms over the 1 GB/s link + 2 ms = 4.097152 ms a transfer.
    # Four requests at 0 (300 tokens): prefilled together [0, 10) on prefill-0, sent
    # [10, 14.097152), decoded on decode-0 from 14.097152: 300 passes, finished at 3014.097152.
    rows = [{"timestamp": 0, "input_length": 16, "output_length": 300} for _ in range(4)]
    rows += [{"timestamp": 2000, "input_length": 16, "output_length": 10},
             {"timestamp": 4000, "input_length": 16, "output_length": 150}]
    extra = _pd()
    extra["engine.workers"]["decode"]["autoscaling"] = HPA
    r = run_rows(tmp_path, rows, config_extra=extra)
    summary = r.result.summary
    assert list(summary["autoscaling"]) == ["decode"]   # the prefill pool keeps its count
    scaled = summary["autoscaling"]["decode"]
    # Syncs [time, live, ready, average, applied]:
    # 1 s: 4 in flight on decode-0: ceil(1 × 4 / 2) = 2: decode-1 provisions, ready at 3.507498752.
    # 2 s, 3 s: decode-0 alone is ready, still 4 in flight: 2 stays.
    # 4 s: both ready and empty: 0 → min 1, but the window [2.5, 4] holds 3 s's 2.
    # 5 s: Q on decode-1: 1 / 2 → ceil(2 × 0.25) = 1; the window [3.5, 5] holds 1 and 1: down to 1.
    #      decode-1, the newest, drains and goes when Q finishes. 6 s: nothing left: the end.
    assert scaled["timeline"] == [[1.0, 1, 1, 4.0, 2], [2.0, 2, 1, 4.0, 2], [3.0, 2, 1, 4.0, 2],
                                  [4.0, 2, 2, 0.0, 2], [5.0, 2, 2, 0.5, 1], [6.0, 1, 1, 0.0, 1]]
    assert scaled["changes"] == [[1.0, "decode-1", "provisioning"], [3.507498752, "decode-1", "ready"],
                                 [5.0, "decode-1", "draining"], [5.514097152, "decode-1", "removed"]]
    by_id = r.by_id
    # R at 2 s, during the cold start: prefill [2000, 2010), sent to decode-0 (the only ready
    # one) by 2014.097152, a pass boundary of decode-0's: first token 2024.097152, TTFT 24.097152 ms.
    assert (by_id[4].worker, by_id[4].first_token_ns, by_id[4].finish_ns) == (
        "decode-0", 2_024_097_152, 2_114_097_152)
    # Q at 4 s goes to decode-1, ready and idle: sent by 4014.097152, first token 10 ms later,
    # 149 more passes: finished at 4014.097152 + 1500 = 5514.097152, when decode-1 goes.
    assert (by_id[5].worker, by_id[5].first_token_ns, by_id[5].finish_ns) == (
        "decode-1", 4_024_097_152, 5_514_097_152)
    # Decode replica-seconds over the window [0, 5.514097152]: decode-0 5.514097152 + decode-1
    # from 1 s, 4.514097152 = 10.028194304; the prefill pool's one GPU adds 5.514097152.
    assert scaled["gpu_hours"] == pytest.approx(10.028194304 / 3600, rel=1e-12)
    assert summary["gpu_hours"] == pytest.approx(15.542291456 / 3600, rel=1e-12)


def test_a_draining_prefill_replica_goes_once_the_kv_it_holds_is_sent(tmp_path):
    # Two prefill replicas synced every 100 ms with nothing queued: ceil(2 × 0 / 4) = 0 → 1,
    # no stabilisation window: at 0.1 s prefill-1, the newest, drains.
    hpa = {"metric": "queue_length", "target": 4, "max_replicas": 2, "sync_period_s": 0.1,
           "scale_down_stabilization_s": 0, "load_bandwidth_gb_s": 8, "startup_s": 0.5}
    # Two 100-token prompts at 0, one on each prefill replica, prefilled [0, 10 ms). The decode
    # worker has 11 usable blocks: request 0 takes 7 for its prompt (its KV sent in 13.1072 ms
    # + 2 ms, [10, 25.1072)), request 1's 7 do not fit beside them: prefill-1 keeps holding
    # its KV until request 0 finishes its 40 tokens at 25.1072 + 400 = 425.1072 ms; then it is
    # sent, [425.1072, 440.2144), and prefill-1, drained, goes.
    rows = [{"timestamp": 0, "input_length": 100, "output_length": 40} for _ in range(2)]
    extra = _pd(decode={"num_gpu_blocks": 12, "max_model_len": 176})
    extra["engine.workers"]["prefill"]["count"] = 2
    extra["engine.workers"]["prefill"]["autoscaling"] = hpa
    r = run_rows(tmp_path, rows, config_extra=extra)
    scaled = r.result.summary["autoscaling"]["prefill"]
    assert scaled["changes"] == [[0.1, "prefill-1", "draining"], [0.4402144, "prefill-1", "removed"]]
    assert [(x.prefill_worker, x.transfer_start_ns, x.transfer_end_ns, x.finish_ns) for x in r.result.requests] == [
        ("prefill-0", 10_000_000, 25_107_200, 425_107_200), ("prefill-1", 425_107_200, 440_214_400, 840_214_400)]
    # Prefill replica-seconds over [0, 0.8402144]: prefill-0 all of it, prefill-1 to 0.4402144.
    assert scaled["gpu_hours"] == pytest.approx((0.8402144 + 0.4402144) / 3600, rel=1e-12)


def _served_once_and_drained(trace, r, counts):
    records = r.result.requests
    assert sorted(rec.request_id for rec in records) == list(range(len(trace)))
    assert all(rec.finish_ns is not None and rec.output_length == trace[rec.request_id]["output_length"]
               for rec in records)
    summary = r.result.summary
    start_s = min(rec.arrival_ns for rec in records) / 1e9
    end_s = start_s + summary["duration_ms"] / 1e3
    total = 0.0
    for role, count in counts.items():
        scaled = summary["autoscaling"].get(role)
        if scaled is None:
            total += count * (end_s - start_s)
            continue
        integral = _integral(scaled, count, start_s, end_s)
        assert scaled["gpu_hours"] == pytest.approx(integral / 3600, rel=1e-9, abs=1e-15)
        total += integral
        ready_at = {name: at for at, name, state in scaled["changes"] if state == "ready"}
        removed_at = {name: at for at, name, state in scaled["changes"] if state == "removed"}
        for rec in records:
            if role == "prefill" and rec.prefill_worker is not None:
                # Routed only to ready replicas; a removed one had sent every KV it held.
                assert rec.arrival_ns / 1e9 >= ready_at.get(rec.prefill_worker, 0.0)
                if rec.transfer_end_ns is not None:
                    assert rec.transfer_end_ns / 1e9 <= removed_at.get(rec.prefill_worker, float("inf"))
            if role == "decode" and rec.worker.startswith("decode"):
                # A removed decode replica had finished every request it took.
                assert rec.finish_ns / 1e9 <= removed_at.get(rec.worker, float("inf"))
                if rec.transfer_start_ns is not None:
                    assert rec.transfer_start_ns / 1e9 >= ready_at.get(rec.worker, 0.0)
    assert summary["gpu_hours"] == pytest.approx(total / 3600, rel=1e-9, abs=1e-15)


@settings(max_examples=12, deadline=None, derandomize=True)
@given(rows=st.lists(st.tuples(st.integers(0, 4000), st.integers(1, 60), st.integers(1, 120)), min_size=1,
                     max_size=25),
       counts=st.tuples(st.integers(1, 2), st.integers(1, 2)), extra=st.integers(0, 2),
       scaled=st.sampled_from([("prefill",), ("decode",), ("prefill", "decode")]),
       metric=st.sampled_from(["in_flight", "queue_length", "kv_utilization"]),
       policy=st.sampled_from(["round_robin", "least_outstanding", "kv_aware", "llm_d"]),
       first_token_from=st.sampled_from(["decode", "prefill"]))
def test_pd_fleets_serve_every_request_once_and_count_gpu_hours_per_role(
        tmp_path_factory, rows, counts, extra, scaled, metric, policy, first_token_from):
    trace = [{"timestamp": t, "input_length": n, "output_length": m} for t, n, m in sorted(rows)]
    counts = dict(zip(("prefill", "decode"), counts))
    target = 0.05 if metric == "kv_utilization" else 1.0
    config = _pd(transfer={"first_token_from": first_token_from},
                 sched={"max_num_seqs": 4, "num_gpu_blocks": 64, "max_model_len": 256})
    for role in ("prefill", "decode"):
        config["engine.workers"][role]["count"] = counts[role]
    for i, role in enumerate(scaled):
        # Different sync periods per role: each pool syncs on its own clock.
        config["engine.workers"][role]["autoscaling"] = {
            "metric": metric, "target": target, "max_replicas": counts[role] + extra,
            "sync_period_s": 0.25 + 0.1 * i, "scale_down_stabilization_s": 0.5, "load_bandwidth_gb_s": 100,
            "startup_s": 0.1}
    config["router.policy"] = policy
    r = run_rows(tmp_path_factory.mktemp("pd"), trace, config_extra=config)
    _served_once_and_drained(trace, r, counts)
