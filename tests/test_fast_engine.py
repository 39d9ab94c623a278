"""The fast engine against the reference: identical per-request records on random workloads.

This is the licence for every optimisation in engine/fast_vllm.py and
engine/decode_group.py: tiny KV caches that force preemption, chunked prefill
with small budgets, thresholds, prefix sharing, async and sync scheduling,
open- and closed-loop clients.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import servesim
from servesim.errors import ServesimError

from .conftest import write_trace
from .test_properties import SPECULATIVE, as_backend, scenarios


def _config(trace, sched, client, trace_block_size, timing):
    return {
        "engine": {"timing": timing, "workers": {"aggregated": {"scheduler": sched}}},
        "workload": {"trace": str(trace), "format": "mooncake", "client": client,
                     "trace_block_size": trace_block_size},
    }


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
    # KV-usage samples are taken per pass record, and a fast-forwarded run is one record.
    for workers in (a["workers"], b["workers"]):
        for w in workers:
            del w["kv_timeline"], w["kv_utilization_mean"]
    assert a == b
    return fast


TIMINGS = st.sampled_from([
    {"kind": "fixed", "pass_ms": 10.0},
    {"kind": "polynomial", "base_ms": 1.5, "per_prefill_token_ms": 0.01, "per_decode_token_ms": 0.02,
     "per_context_token_ms": 0.001},
])


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenarios(), TIMINGS)
def test_fast_matches_reference(tmp_path, scenario, timing):
    rows, sched, client, trace_block_size = scenario
    trace = write_trace(tmp_path / "t.jsonl", rows)
    config = _config(trace, sched, client, trace_block_size, timing)
    # A third of the requests are warm-up: the ITL histogram leaves their gaps out, which the
    # fast engine must count apart inside its bulk deliveries.
    config["workload"]["warmup_requests"] = len(rows) // 3
    assert_same(config)


@st.composite
def steady_scenarios(draw):
    """Bigger batches of long decodes, where the aggregate path does most passes."""
    n = draw(st.integers(20, 80))
    rows = []
    t = 0.0
    for _ in range(n):
        t += draw(st.sampled_from([0.0, 1.3, 7.7, 25.0]))
        rows.append({"timestamp": round(t, 3), "input_length": draw(st.integers(1, 300)),
                     "output_length": draw(st.integers(1, 200)),
                     **({"hash_ids": draw(st.lists(st.integers(0, 3), min_size=1, max_size=4))}
                        if draw(st.booleans()) else {})})
    block_size = draw(st.sampled_from([8, 16]))
    sched = {
        "block_size": block_size,
        "max_model_len": 512,
        "num_gpu_blocks": draw(st.sampled_from([512 // block_size + 5, 200, 2000])),
        "max_num_seqs": draw(st.sampled_from([8, 32, 128])),
        "max_num_batched_tokens": draw(st.sampled_from([128, 512, 2048])),
        "enable_prefix_caching": draw(st.booleans()),
        "long_prefill_token_threshold": draw(st.sampled_from([0, 64])),
        "async_scheduling": draw(st.booleans()),
    }
    client = draw(st.sampled_from([{"mode": "open_loop"}, {"mode": "closed_loop", "concurrency": 16}]))
    return rows, sched, client, 32


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steady_scenarios(), TIMINGS)
def test_fast_matches_reference_steady(tmp_path, scenario, timing):
    rows, sched, client, trace_block_size = scenario
    trace = write_trace(tmp_path / "t.jsonl", rows)
    config = _config(trace, sched, client, trace_block_size, timing)
    config["workload"]["warmup_requests"] = len(rows) // 4
    assert_same(config)


def test_default_run_matches_reference():
    fast = servesim.simulate()
    reference = servesim.simulate(overrides=[("engine.reference", True)])
    assert fast.requests == reference.requests


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenarios(), st.one_of(TIMINGS, st.just({"kind": "roofline"})), st.sampled_from(["prefill", "decode"]),
       st.sampled_from(["round_robin", "kv_aware"]),
       st.sampled_from(["vllm", "sglang", "trtllm"]), st.data(), st.sampled_from([0.0, 3.7]))
def test_fast_matches_reference_disaggregated(tmp_path, scenario, timing, first_token_from, policy, backend, data,
                                              tokenization_ms):
    rows, sched, client, trace_block_size = scenario
    trace = write_trace(tmp_path / "t.jsonl", rows)
    sched = as_backend(sched, backend, data)
    config = _config(trace, sched, client, trace_block_size, timing)
    config["engine"]["backend"] = backend
    config["engine"]["workers"] = {"prefill": {"count": 2, "scheduler": dict(sched)},
                                   "decode": {"count": 2, "scheduler": dict(sched)}}
    config["engine"]["kv_transfer"] = {"bandwidth_gb_s": 50.0, "latency_ms": 0.5, "first_token_from": first_token_from}
    config["router"] = {"policy": policy}
    config["engine"]["tokenization_ms"] = tokenization_ms
    assert_same(config)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenarios(), TIMINGS, st.sampled_from(["vllm", "sglang", "trtllm"]), SPECULATIVE, st.data())
def test_fast_matches_reference_every_backend(tmp_path, scenario, timing, backend, speculative, data):
    """All three backends, with and without speculative decoding and KV offload, against the reference."""
    rows, sched, client, trace_block_size = scenario
    if speculative is not None and speculative["method"] == "ngram" and backend == "vllm":
        sched = dict(sched, async_scheduling=False)   # vLLM refuses n-gram drafts with async scheduling
    trace = write_trace(tmp_path / "t.jsonl", rows)
    config = _config(trace, as_backend(sched, backend, data), client, trace_block_size, timing)
    config["engine"]["backend"] = backend
    if speculative is not None:
        config["engine"]["workers"]["aggregated"]["speculative"] = speculative
    if backend != "trtllm" and sched["enable_prefix_caching"] and data.draw(st.booleans()):
        # Host room for 0-12 blocks of 4 tokens (524,288 bytes each for the default model).
        host_gb = data.draw(st.sampled_from([0.0006, 0.003, 0.007]))
        config["engine"]["workers"]["aggregated"]["kv_offload"] = {"host_gb": host_gb, "bandwidth_gb_s": 2.0}
    assert_same(config)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenarios(), TIMINGS)
def test_single_request_prefixes_as_private_blocks_change_nothing(tmp_path, monkeypatch, scenario, timing):
    """Knowing which hash_id prefixes only one request reaches (PrefixInterner.count_requests)
    lets the fast cache treat their blocks as private; the records must not change."""
    from servesim.workload.prompt import PrefixInterner

    rows, sched, client, trace_block_size = scenario
    trace = write_trace(tmp_path / "t.jsonl", rows)
    config = _config(trace, sched, client, trace_block_size, timing)
    counted = servesim.simulate(config)
    with monkeypatch.context() as patch:
        patch.setattr(PrefixInterner, "count_requests", lambda self, requests, size: None)
        uncounted = servesim.simulate(config)
    assert counted.requests == uncounted.requests


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steady_scenarios(), TIMINGS, st.sampled_from(["round_robin", "least_outstanding", "kv_aware", "random"]),
       st.integers(2, 4), st.sampled_from([0.0, 0.3]))
def test_fast_matches_reference_replicas(tmp_path, scenario, timing, policy, count, tokenization_ms):
    """Several aggregated workers behind a router: each fast-forwards up to its own horizon."""
    rows, sched, client, trace_block_size = scenario
    trace = write_trace(tmp_path / "t.jsonl", rows)
    config = _config(trace, sched, client, trace_block_size, timing)
    config["engine"]["workers"]["aggregated"]["count"] = count
    config["engine"]["tokenization_ms"] = tokenization_ms
    config["router"] = {"policy": policy}
    assert_same(config)


def test_preemption_in_aggregate_form(run, monkeypatch):
    """A KV shortage among decode-group members preempts the newest member without dissolving the group."""
    from servesim.engine.fast_vllm import FastVllmScheduler

    dissolved_members = []
    dissolve = FastVllmScheduler._dissolve

    def counting_dissolve(self):
        dissolved_members.append(len(self.group.members))
        dissolve(self)

    monkeypatch.setattr(FastVllmScheduler, "_dissolve", counting_dissolve)
    rows = [{"timestamp": 0.0, "input_length": 4, "output_length": 9} for _ in range(3)]
    r = run(rows, async_scheduling=False, enable_prefix_caching=False, block_size=4, num_gpu_blocks=8,
            max_num_seqs=8, max_num_batched_tokens=64, max_model_len=28)
    # 7 usable blocks of 4. Pass 1 [0,10): three 4-token prompts, 1 block each (3 used).
    # Pass 2 computes position 4 for each: a 2nd block each (6 used, 1 free); pass p
    # computes position p + 2, so pass 6 [50,60) needs a 3rd block for all three with 1
    # free: R0 takes it, R1 finds none, and the newest, R2, is preempted (its 2 blocks
    # freed); R1 takes one of them.
    assert r.pass_at(50)["preempted"] == [2]
    assert r.pass_at(50)["scheduled"] == {"0": 1, "1": 1}
    # R0 and R1 get their 9th token in pass 9 and finish at 90. R2 (4 + 5 tokens, needs 3
    # blocks, 1 free) waits until then; pass 10 recomputes its 9 tokens and samples its
    # 6th output, passes 11-13 the 7th to 9th: it finishes at 130.
    assert [r.by_id[i].finish_ns // 1_000_000 for i in range(3)] == [90, 90, 130]
    assert [r.by_id[i].preemptions for i in range(3)] == [0, 0, 1]
    # The group was never turned back into explicit requests to preempt.
    assert not any(dissolved_members)


def test_kv_peak_of_a_run_with_a_transfer_reserved_in_its_last_step(tmp_path):
    """Found by an explore draw: a decode worker's fast-forwarded run whose members leave at its
    last step, during which a KV transfer reserves blocks there. The run's KV peak must be the
    usage at the end of its next-to-last pass (as the reference samples it), without them."""
    rows = ([{"timestamp": 0.0, "input_length": 1, "output_length": n} for n in (1, 12, 1, 1)]
            + [{"timestamp": 47.1, "input_length": 1, "output_length": 1},
               {"timestamp": 47.35, "input_length": 49, "output_length": 2},
               {"timestamp": 47.35, "input_length": 17, "output_length": 2}]
            + [{"timestamp": 47.35, "input_length": 1, "output_length": 1}] * 10
            + [{"timestamp": 47.35, "input_length": 25, "output_length": 1}]
            + [{"timestamp": 47.35, "input_length": 1, "output_length": 1}] * 2)
    trace = write_trace(tmp_path / "t.jsonl", rows)
    for async_scheduling in (False, True):
        sched = {"block_size": 4, "max_model_len": 64, "num_gpu_blocks": 17, "max_num_seqs": 3,
                 "max_num_batched_tokens": 64, "enable_chunked_prefill": False, "enable_prefix_caching": False,
                 "long_prefill_token_threshold": 8, "async_scheduling": async_scheduling}
        config = _config(trace, sched, {"mode": "open_loop"}, 4, {"kind": "fixed", "pass_ms": 10.0})
        config["engine"]["workers"] = {"prefill": {"count": 2, "scheduler": dict(sched)},
                                       "decode": {"count": 2, "scheduler": dict(sched)}}
        config["engine"]["kv_transfer"] = {"bandwidth_gb_s": 50.0, "latency_ms": 0.5, "first_token_from": "prefill"}
        config["router"] = {"policy": "round_robin"}
        fast = assert_same(config)
        # Sync: decode-0's run of [100.5, 120.5) ms has 3 blocks in use at the end of its
        # next-to-last pass (request 1 alone, 12 tokens computed in blocks of 4). In its last
        # step request 5's transfer (at 117.35) reserves ceil(49 / 4) = 13 blocks, and at the end
        # request 1 leaves with its blocks: the reference samples 3, then 13, so the peak is 13
        # of 16 usable. An estimate made at the run's end added request 1's 3 to the 13: 16.
        if not async_scheduling:
            assert fast.summary["workers"][2]["kv_utilization_max"] == 13 / 16


def test_joiners_ride_a_run_from_its_first_step(tmp_path, monkeypatch):
    """A request whose first decode comes right after its prefill pass joins the group and rides
    the fast-forwarded run that starts there, instead of costing a pass record of its own."""
    from servesim.metrics.collector import Collector

    records = []
    on_pass = Collector.on_pass

    def recording_on_pass(self, worker, done):
        records.append((done.start_ns // 1_000_000, done.end_ns // 1_000_000))
        on_pass(self, worker, done)

    monkeypatch.setattr(Collector, "on_pass", recording_on_pass)
    rows = [{"timestamp": 0.0, "input_length": 4, "output_length": 6},
            {"timestamp": 25.0, "input_length": 4, "output_length": 4}]
    sched = {"async_scheduling": False, "enable_prefix_caching": False, "block_size": 4, "num_gpu_blocks": 64,
             "max_num_seqs": 8, "max_num_batched_tokens": 64, "max_model_len": 64}
    config = _config(write_trace(tmp_path / "t.jsonl", rows), sched, {"mode": "open_loop"}, 4,
                     {"kind": "fixed", "pass_ms": 10.0})
    fast = servesim.simulate(config)
    # Fixed 10 ms passes. [0,10): R0's prefill, its 1st token. R0 joins at [10,20) with its
    # token at 10 = the pass start, so it rides a run; R1 arrives at 25, read at the end of
    # [20,30): the run is [10,30), one record. [30,40): R1's prefill (R0 decodes). R1 joins at
    # [40,50) and rides the run to R0's last (6th) token at 60: [40,60). [60,70): R1's 4th
    # token alone. Five records, where one per join pass would make seven.
    assert records == [(0, 10), (10, 30), (30, 40), (40, 60), (60, 70)]
    by_id = {r.request_id: r for r in fast.requests}
    assert [by_id[i].finish_ns // 1_000_000 for i in range(2)] == [60, 70]
    assert [by_id[i].ttft_ns // 1_000_000 for i in range(2)] == [10, 15]
    # Every gap is one pass: R0's 5 and R1's 3, all 10 ms.
    assert fast.summary["mean_itl_ms"] == pytest.approx(10.0)
    records.clear()
    assert_same(config)
