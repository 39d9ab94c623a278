"""The KV-event path to a kv_aware router (cluster/kv_events.py): a pass's cache changes reach
the router's index at the pass end plus the transport delay, worked out by hand."""

from __future__ import annotations

import pytest

from servesim.cluster.build import open_simulation
from servesim.errors import ServesimError
from servesim.workload.trace import TraceRequest

MS = 1_000_000


def _config(kv_events: str = "pass_end", delay_ms: float = 2.0, backend: str = "vllm",
            reference: bool = False) -> dict:
    scheduler = {
        "vllm": {"max_num_batched_tokens": 2048, "async_scheduling": False},
        "sglang": {"chunked_prefill_size": 2048, "disable_overlap_schedule": True, "page_size": 16},
        "trtllm": {"max_num_tokens": 2048, "disable_overlap_scheduler": True, "tokens_per_block": 16},
    }[backend]
    return {
        "model": "llama-3.1-8b", "gpu": "h100-sxm",
        "engine": {"backend": backend, "reference": reference, "tokenization_ms": 0.0,
                   "timing": {"kind": "fixed", "pass_ms": 10.0},
                   "workers": {"aggregated": {"count": 2, "scheduler": scheduler}}},
        "router": {"policy": "kv_aware", "kv_events": kv_events, "kv_events_delay_ms": delay_ms},
        "workload": {"synthetic": {"num_requests": 2, "input_length": {"min": 100, "max": 100},
                                   "output_length": {"min": 3, "max": 3}}},
    }


# A: 1,536 tokens under trace blocks (1, 2, 9) of 512, so 96 shareable 16-token blocks; 50
# outputs keep it on its worker well past the probes. B shares A's first two trace blocks
# (64 of its 96 blocks) and has a third of its own.
A = TraceRequest(1, None, 1536, 50, hash_ids=(1, 2, 9))


def _b(request_id: int = 2) -> TraceRequest:
    return TraceRequest(request_id, None, 1536, 50, hash_ids=(1, 2, 3))


def _route_b_at(t_ms: float, **kw) -> str:
    """The worker B goes to when it reaches the router at `t_ms`, A having gone at 0."""
    sim = open_simulation(_config(**kw))
    sim.submit(A, at=0)
    sim.submit(_b(), at=round(t_ms * MS))
    sim.run_until(round(t_ms * MS) + 1)
    (b,) = [r for w in sim.roles["aggregated"].workers for r in w.requests() if r.request_id == 2]
    return b.worker


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_a_pass_is_published_at_its_end_plus_the_delay(backend):
    # A reaches worker 0 at 0 ms (both empty: a tie to the lowest index). Its one prefill pass
    # runs 0-10 ms; the scheduler keyed its 96 blocks when it scheduled the pass, at 0 ms, and
    # the step publishes them when the pass ends, at 10 ms; they reach the router at 12 ms.
    sim = open_simulation(_config(backend=backend))
    sim.submit(A, at=0)
    w0, w1 = sim.roles["aggregated"].workers
    index = sim.routers["aggregated"].selector.indexes[id(w0)]
    keys = sim.factories["aggregated"].keys(_b())
    for t_ms, engine_holds, router_sees in [(5, 64, 0), (11, 64, 0), (12, 64, 64)]:
        sim.run_until(t_ms * MS)
        assert w0.scheduler.kv.cached_prefix_blocks(keys) == engine_holds
        assert index.cached_prefix_blocks(keys, sim.now) == router_sees
    assert sim.routers["aggregated"].selector.indexes[id(w1)].heard == {}


def test_a_request_in_the_window_does_not_see_the_hit():
    # B's cost on each worker (block size 16; A's first token is back at 10 ms, so its 1,536
    # prefill tokens no longer count; A's 96 blocks are active on w0, 32 of them its own):
    #   hit unseen: w0 = 1536/16 + (96 + B's 32 new) = 96 + 128 = 224; w1 = 96 + 96 = 192 → w1
    #   hit seen:   w0 = (1536 - 64·16)/16 + 128 = 32 + 128 = 160 < 192 → w0
    assert _route_b_at(11) == "aggregated-1"          # the event left at 10 ms, arrives at 12
    assert _route_b_at(12) == "aggregated-0"          # it has arrived
    assert _route_b_at(11, delay_ms=0.0) == "aggregated-0"
    assert _route_b_at(11, kv_events="instant") == "aggregated-0"


def test_during_the_pass_the_hit_is_unseen_even_without_delay():
    # At 5 ms A's prefill pass still runs: its blocks are keyed but not yet published.
    # Cost of w0 unseen: (1536 + 1536)/16 + 128 = 320; seen (instant): (1536 + 512)/16 + 128
    # = 256; w1: 192 either way → w1 both times, so compare the router's view itself.
    sim = open_simulation(_config(delay_ms=0.0))
    sim.submit(A, at=0)
    sim.run_until(5 * MS)
    w0 = sim.roles["aggregated"].workers[0]
    keys = sim.factories["aggregated"].keys(_b())
    costs, _ = sim.routers["aggregated"].selector.costs(1536, lambda w: keys, sim.now)
    assert costs == [320.0, 192.0]
    instant = open_simulation(_config(kv_events="instant"))
    instant.submit(A, at=0)
    instant.run_until(5 * MS)
    costs, _ = instant.routers["aggregated"].selector.costs(1536, lambda w: keys, instant.now)
    assert costs == [256.0, 192.0]
    assert w0.scheduler.kv.cached_prefix_blocks(keys) == 64


def test_reference_engine_routes_the_same():
    for t_ms in (11, 12):
        sim = open_simulation(_config(reference=True))
        sim.submit(A, at=0)
        sim.submit(_b(), at=t_ms * MS)
        sim.run()
        workers = {r.request_id: r.worker for r in sim.collector.records}
        assert workers[2] == ("aggregated-1" if t_ms == 11 else "aggregated-0")


def test_an_eviction_is_seen_at_once():
    # The index never shows more than the cache holds: after the engine drops a prefix id's
    # blocks, the router's view of them is 0 though no event said so.
    sim = open_simulation(_config(delay_ms=0.0))
    sim.submit(A, at=0)
    sim.run_until(11 * MS)
    w0 = sim.roles["aggregated"].workers[0]
    index = sim.routers["aggregated"].selector.indexes[id(w0)]
    keys = sim.factories["aggregated"].keys(_b())
    assert index.cached_prefix_blocks(keys, sim.now) == 64
    kv = w0.scheduler.kv
    chunk = kv.chunks[keys.chunk_spans()[1][0]]   # the second trace block's 32 blocks
    del chunk[8:]                                  # as if its tail were evicted
    assert index.cached_prefix_blocks(keys, sim.now) == 32 + 8


def test_bad_kv_events_settings_are_one_sentence():
    with pytest.raises(ServesimError):
        open_simulation(_config(kv_events="sometimes"))
    with pytest.raises(ServesimError):
        open_simulation(_config(delay_ms=-1.0))


# ---------------------------------------------------------------- no KV events (approximate)

def test_without_events_the_router_predicts_from_what_it_sent():
    # Dynamo's --no-kv-events: the router assumes A's 96 blocks are cached on w0 from the
    # moment it sent A (0 ms), before the engine has scheduled anything, for router_ttl_secs
    # (here 1 s) after each send. B shares A's first 64 blocks.
    config = _config(kv_events="none")
    config["router"]["router_ttl_secs"] = 1.0
    sim = open_simulation(config)
    sim.submit(A, at=0)
    sim.run_until(1)
    w0 = sim.roles["aggregated"].workers[0]
    index = sim.routers["aggregated"].selector.indexes[id(w0)]
    keys = sim.factories["aggregated"].keys(_b())
    assert index.cached_prefix_blocks(keys, 0) == 64
    assert index.cached_prefix_blocks(keys, 1000 * MS - 1) == 64
    assert index.cached_prefix_blocks(keys, 1000 * MS) == 0        # expired: 0 + 1 s
    assert not sim.routers["aggregated"].hears_kv_events


def test_a_later_send_refreshes_the_head_it_shares():
    # A (trace blocks 1, 2, 9) sent at 0, B (1, 2, 3) at 600 ms, TTL 1 s: the first 64 blocks
    # live until 1.6 s, A's third trace block (its last 32) until 1 s.
    from servesim.cluster.kv_events import PredictedPrefixes
    sim = open_simulation(_config())
    keys_a = sim.factories["aggregated"].keys(A)
    keys_b = sim.factories["aggregated"].keys(_b())
    index = PredictedPrefixes(sim.roles["aggregated"].workers[0], 1000 * MS)
    index.routed(keys_a, 0)
    index.routed(keys_b, 600 * MS)
    assert index.cached_prefix_blocks(keys_a, 999 * MS) == 96
    assert index.cached_prefix_blocks(keys_a, 1000 * MS) == 64
    assert index.live_blocks(1000 * MS) == 64 + 32                 # B's own third block lives on
    assert index.cached_prefix_blocks(keys_a, 1600 * MS) == 0
