"""Fleets of aggregated workers behind a router (fixed 10 ms passes, synchronous scheduling)."""

from __future__ import annotations


def _fleet(count, policy="round_robin", **router):
    return {"engine.workers.aggregated.count": count, "router": {"policy": policy, **router}}


def test_two_replicas_round_robin(run):
    rows = [{"timestamp": t, "input_length": 8, "output_length": 2} for t in (0.0, 1.0, 2.0, 3.0)]
    r = run(rows, config_extra=_fleet(2), async_scheduling=False)
    assert [r.by_id[i].worker for i in range(4)] == ["aggregated-0", "aggregated-1", "aggregated-0",
                                                      "aggregated-1"]
    # Worker 0: request 0 runs [0,10) (token 1) and [10,20) (token 2); request 2 arrives at 2 ms,
    # mid-pass, joins at 10: [10,20) and [20,30), so TTFT = 20 - 2. Worker 1 the same, 1 ms
    # later: request 3 (at 3 ms) prefills in [11,21), TTFT = 21 - 3.
    assert [r.ttft_ms(i) for i in range(4)] == [10, 10, 18, 18]
    assert r.by_id[2].finish_ns == 30_000_000
    assert r.by_id[3].finish_ns == 31_000_000
    workers = {w["worker"]: w for w in r.result.summary["workers"]}
    assert workers["aggregated-0"]["passes"] == 3 and workers["aggregated-1"]["passes"] == 3
    assert r.result.summary["gpus"] == 2


def test_least_outstanding_under_skew(run):
    # Request 0 is big (100 + 50 tokens in flight), the rest small (10 + 2).
    rows = [{"timestamp": 0.0, "input_length": 100, "output_length": 50}] + [
        {"timestamp": 0.5 + i, "input_length": 10, "output_length": 2} for i in range(4)]
    r = run(rows, config_extra=_fleet(2, "least_outstanding"), async_scheduling=False)
    # 0 → worker 0 (tie, lowest index). 1 → worker 1 (0 < 150 in flight). 2 (at 1.5 ms) → worker 1
    # (12 < 150). 3 (at 2.5 ms) → worker 1 (24 < 150). 4 (at 3.5 ms) → worker 1 (36 < 150): the big
    # request keeps worker 0 to itself; round robin would have sent 2 and 4 there.
    assert [r.by_id[i].worker for i in range(5)] == ["aggregated-0"] + ["aggregated-1"] * 4
    rr = run(rows, config_extra=_fleet(2, "round_robin"), async_scheduling=False)
    assert [rr.by_id[i].worker[-1] for i in range(5)] == list("01010")


def test_random_router_is_seeded(run):
    rows = [{"timestamp": float(i), "input_length": 8, "output_length": 1} for i in range(20)]
    a = run(rows, config_extra=_fleet(4, "random"), async_scheduling=False)
    b = run(rows, config_extra=_fleet(4, "random"), async_scheduling=False)
    c = run(rows, config_extra={**_fleet(4, "random", seed=7)}, async_scheduling=False)
    pick = [a.by_id[i].worker for i in range(20)]
    assert pick == [b.by_id[i].worker for i in range(20)]
    assert pick != [c.by_id[i].worker for i in range(20)]
    assert len(set(pick)) == 4


SHARED = [1, 2, 3, 4]      # 4 trace blocks of 16 tokens = 64 tokens = 4 engine blocks
OTHER = [9, 8, 7, 6]


def _req(t, ids, inp=80, out=2):
    return {"timestamp": t, "input_length": inp, "output_length": out, "hash_ids": ids}


def test_kv_aware_sends_a_repeated_prefix_back(run):
    # Cost = prefill tokens / 16 (queued + this prompt past the cached prefix) + decode blocks
    # (the router's tracked full prompt blocks, this one's included). 0 → worker 0 (tie at
    # 80/16 + 5 = 10). 1 (other prefix) at 0.5 ms: request 0's prefill is still queued on
    # worker 0: (80 + 80)/16 + 5 + 5 = 20 vs 10 → worker 1. At 50 ms both finished (blocks
    # cached): request 2 shares request 0's first 4 blocks: worker 0 (80 - 64)/16 + 5 = 6, worker 1 10.
    rows = [_req(0.0, SHARED), _req(0.5, OTHER), _req(50.0, SHARED)]
    r = run(rows, config_extra={**_fleet(2, "kv_aware"), "workload.trace_block_size": 16},
            async_scheduling=False)
    assert [r.by_id[i].worker for i in range(3)] == ["aggregated-0", "aggregated-1", "aggregated-0"]
    assert r.by_id[2].cached_tokens == 64


def test_kv_aware_avoids_a_loaded_worker(run):
    # As above, but when request 3 arrives (60.5 ms) worker 0 is decoding a long request 2
    # (150 tokens: 9 full blocks tracked, its prefill done at 60 ms): worker 0 costs
    # (80 - 64)/16 + 9 + 5 = 15, worker 1 80/16 + 5 = 10.
    rows = [_req(0.0, SHARED), _req(0.5, OTHER), _req(50.0, [5], inp=150, out=400), _req(60.5, SHARED)]
    r = run(rows, config_extra={**_fleet(2, "kv_aware"), "workload.trace_block_size": 16},
            async_scheduling=False)
    assert r.by_id[2].worker == "aggregated-0"
    assert r.by_id[3].worker == "aggregated-1"
    # With the overlap weighted 3 times, the cached prefix wins again: 3 × 1 + 14 < 3 × 5 + 5.
    w = run(rows, config_extra={**_fleet(2, "kv_aware", overlap_weight=3.0), "workload.trace_block_size": 16},
            async_scheduling=False)
    assert w.by_id[3].worker == "aggregated-0"


def test_kv_aware_counts_what_it_sent_before_the_engine_sees_it(run):
    # Three 80-token requests at 0, 0.1, 0.2 ms, same prefix: nothing is cached before the first
    # prefill ends (10 ms), so the router balances on its own queued prefill: 0 → w0 (tie),
    # 1 → w1 (w0: (80+80)/16 + 5 + 1 = 16 against 10; the shared 4 blocks are tracked once),
    # 2 → w0 (w0 16, w1 16: tie, lowest index).
    rows = [_req(0.0, SHARED), _req(0.1, SHARED), _req(0.2, SHARED)]
    r = run(rows, config_extra={**_fleet(2, "kv_aware"), "workload.trace_block_size": 16},
            async_scheduling=False)
    assert [r.by_id[i].worker for i in range(3)] == ["aggregated-0", "aggregated-1", "aggregated-0"]


def test_llm_d_follows_its_own_prefix_memory(run):
    # 128-token prompts, 64-token picker blocks. 0 → w0 (every score equal, the seeded draw);
    # the picker remembers its 2 blocks there. At 50 ms (both idle, queues and KV equal after
    # the finishes) request 1 shares both blocks: w0 3·1 + 2 + 2 = 7 against w1 4 → w0.
    rows = [_req(0.0, [1, 2], inp=128), _req(50.0, [1, 2], inp=128)]
    r = run(rows, config_extra={**_fleet(2, "llm_d"), "workload.trace_block_size": 64},
            async_scheduling=False)
    assert r.by_id[0].worker == r.by_id[1].worker
