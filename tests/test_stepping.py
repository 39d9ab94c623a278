"""The steppable loop (cluster/simulation.py, cluster/build.py): submit, run_until, snapshot,
abort, a per-token callback, and run() to the end, against hand-worked passes."""

from __future__ import annotations

import io

import pytest

import servesim
from servesim.cluster.build import open_simulation
from servesim.engine.request import Status
from servesim.errors import ServesimError
from servesim.workload.clients import make_client
from servesim.workload.trace import TraceRequest

MS = 1_000_000

# One slot per engine, so a second request waits; no overlap, so a pass's outputs are
# processed before the next pass is committed (the hand arithmetic below follows it).
ONE_SLOT = {
    "vllm": {"max_num_seqs": 1, "max_num_batched_tokens": 2048, "async_scheduling": False},
    "sglang": {"max_running_requests": 1, "disable_overlap_schedule": True, "page_size": 16},
    "trtllm": {"max_batch_size": 1, "disable_overlap_scheduler": True},
}


def _config(backend: str = "vllm", scheduler: dict | None = None, reference: bool = False) -> dict:
    sched = ONE_SLOT[backend] if scheduler is None else scheduler
    return {
        "model": "llama-3.1-8b", "gpu": "h100-sxm",
        "engine": {"backend": backend, "reference": reference, "tokenization_ms": 0.0,
                   "timing": {"kind": "fixed", "pass_ms": 10.0},
                   "workers": {"aggregated": {"scheduler": sched}}},
        "workload": {"synthetic": {"num_requests": 2, "input_length": {"min": 100, "max": 100},
                                   "output_length": {"min": 3, "max": 3}}},
    }


def _request(request_id: int, input_length: int = 100, output_length: int = 3) -> TraceRequest:
    return TraceRequest(request_id, None, input_length, output_length)


def _state(sim):
    (worker,) = sim.snapshot()
    return worker.running, worker.waiting, worker.kv_blocks_used, worker.busy


def test_submit_run_until_snapshot_by_hand():
    # One request, 100 prompt tokens, 3 outputs, 10 ms passes, no tokenization delay:
    # the prefill pass runs 0-10 ms and samples token 1; decode passes 10-20 and 20-30 ms
    # give tokens 2 and 3, and it finishes at 30 ms. Its KV: 101 tokens in 16-token blocks
    # while the second pass runs = 7 blocks (ceil(101 / 16)); none once it finishes (its
    # full blocks stay cached, evictable, which counts as free).
    tokens = []
    sim = open_simulation(_config(), on_token=lambda rid, t, n: tokens.append((rid, t, n)))
    sim.submit(_request(7), at=0)
    sim.run_until(15 * MS)
    assert sim.now == 15 * MS
    assert _state(sim) == (1, 0, 7, True)
    assert tokens == [(7, 10 * MS, 1)]
    sim.run_until(25 * MS)
    assert tokens == [(7, 10 * MS, 1), (7, 20 * MS, 2)]
    sim.run()
    assert tokens[-1] == (7, 30 * MS, 3)
    assert _state(sim) == (0, 0, 0, False)
    (record,) = list(sim.collector.records)
    assert (record.request_id, record.ttft_ns, record.e2e_ns) == (7, 10 * MS, 30 * MS)


def test_a_second_request_waits_for_the_one_slot():
    # Request 2 arrives at 5 ms while request 1 holds the one slot (0-30 ms): it waits, and
    # holds no blocks, until request 1 finishes at 30 ms; its prefill then runs 30-40 ms.
    sim = open_simulation(_config())
    sim.submit(_request(1), at=0)
    sim.submit(_request(2), at=5 * MS)
    sim.run_until(25 * MS)
    assert _state(sim) == (1, 1, 7, True)
    sim.run()
    ttft = {r.request_id: r.ttft_ns for r in sim.collector.records}
    assert ttft == {1: 10 * MS, 2: 40 * MS - 5 * MS}


@pytest.mark.parametrize("reference", [False, True], ids=["fast", "reference"])
@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_abort_frees_a_running_and_a_waiting_request(backend, reference):
    # Request 1 (long output) runs, request 2 waits for the slot. Aborts reach the engine at
    # its next scheduler call with no pass in flight: the pass end after them.
    sim = open_simulation(_config(backend, reference=reference))
    sim.submit(_request(1, output_length=1000), at=0)
    sim.submit(_request(2), at=0)
    sim.run_until(25 * MS)
    running, waiting, used, _ = _state(sim)
    assert (running, waiting) == (1, 1) and used > 0
    sim.abort(2, at=25 * MS)
    sim.run_until(31 * MS)             # the pass end at 30 ms applied it
    assert _state(sim)[:3] == (1, 0, used)   # it held no blocks
    sim.abort(1, at=31 * MS)
    sim.run_until(41 * MS)             # ... and at 40 ms
    assert _state(sim)[:3] == (0, 0, 0)
    assert [(r.request_id, r.status, r.finish_ns) for r in sim.aborted] == [
        (2, Status.ABORTED, 30 * MS), (1, Status.ABORTED, 40 * MS)]
    scheduler = sim.roles["aggregated"].workers[0].scheduler
    assert scheduler.fast_forwards is not reference   # the engine this case meant ran
    sim.run()
    assert len(sim.collector.records) == 0            # an aborted request leaves no row


def test_abort_of_a_decode_group_member_dissolves_the_group():
    from servesim.engine.vllm.fast import FastVllmScheduler

    sim = open_simulation(_config())
    sim.submit(_request(1, output_length=1000), at=0)
    sim.run_until(35 * MS)
    scheduler = sim.roles["aggregated"].workers[0].scheduler
    assert isinstance(scheduler, FastVllmScheduler) and len(scheduler.group.members) == 1
    sim.abort(1, at=35 * MS)
    sim.run_until(41 * MS)
    assert not scheduler.group.members and _state(sim)[:3] == (0, 0, 0)


def test_abort_async_drains_the_batch_queue_first():
    # Async scheduling: at the 30 ms pass end the pass 30-40 ms is already committed; the
    # abort at 25 ms commits nothing behind it, and applies at its end, 40 ms.
    sched = dict(ONE_SLOT["vllm"], async_scheduling=True)
    sim = open_simulation(_config("vllm", sched, reference=True))
    sim.submit(_request(1, output_length=1000), at=0)
    sim.run_until(25 * MS)
    sim.abort(1, at=25 * MS)
    sim.run_until(39 * MS)
    assert _state(sim)[0] == 1
    sim.run_until(41 * MS)
    assert _state(sim)[:3] == (0, 0, 0) and sim.aborted[0].finish_ns == 40 * MS


def test_abort_of_a_finished_or_unknown_request_does_nothing():
    sim = open_simulation(_config())
    sim.submit(_request(1), at=0)
    sim.run_until(35 * MS)
    sim.abort(1, at=35 * MS)
    sim.abort(99, at=35 * MS)
    sim.run()
    assert sim.aborted == [] and len(sim.collector.records) == 1


def test_same_instant_order_arrival_and_abort_at_a_pass_end():
    # cluster/simulation.py: pass ends, then frontend events (submits, aborts) in the order
    # made, then engine arrivals, then scheduler calls. With two slots, request 2 submitted
    # at 10 ms (request 1's prefill pass end) is read by the call at 10 ms: its prefill runs
    # in the pass 10-20 ms, first token at 20 ms. Request 1 aborted at 20 ms (a pass end):
    # that pass's token (its 2nd) is delivered first, and the call at 20 ms drops it.
    tokens = []
    sched = dict(ONE_SLOT["vllm"], max_num_seqs=2)
    sim = open_simulation(_config("vllm", sched), on_token=lambda rid, t, n: tokens.append((rid, t, n)))
    sim.submit(_request(1, output_length=100), at=0)
    sim.submit(_request(2, output_length=100), at=10 * MS)
    sim.abort(1, at=20 * MS)
    sim.run_until(21 * MS)
    assert tokens == [(1, 10 * MS, 1), (1, 20 * MS, 2), (2, 20 * MS, 1)]
    assert [r.finish_ns for r in sim.aborted] == [20 * MS]
    assert _state(sim)[:2] == (1, 0)


def test_inputs_before_the_clock_are_refused():
    sim = open_simulation(_config())
    sim.run_until(10 * MS)
    with pytest.raises(ServesimError, match="from the clock's 10000000 on"):
        sim.submit(_request(1), at=10 * MS - 1)
    with pytest.raises(ServesimError, match="integer time"):
        sim.abort(1, at=1.5e7)
    with pytest.raises(ServesimError, match="run_until"):
        sim.run_until(5 * MS)


def test_abort_under_disaggregation_is_refused():
    cfg = _config()
    cfg["engine"]["workers"] = {"prefill": {}, "decode": {}}
    sim = open_simulation(cfg)
    with pytest.raises(ServesimError, match="disaggregation is not modelled"):
        sim.abort(1, at=0)


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_run_equals_the_batch_run(backend):
    # The embedded default's trace, 150 requests under the open-loop client: submitted one
    # by one at the client's arrival times and stepped in 50 ms slices, the loop gives the
    # batch runner's records exactly.
    overrides = [("workload.max_requests", 150), ("engine.backend", backend)]
    batch = servesim.simulate(None, overrides=overrides)
    sim = open_simulation(None, overrides)
    from servesim.workload.trace import load_trace

    requests, _ = load_trace(batch.config.workload.trace, batch.config.workload.format, 150)
    arrivals = list(make_client(batch.config.workload.client, requests, batch.config.seed).initial())
    for at, request in arrivals:
        sim.submit(request, at)
    t = 0
    while t < arrivals[-1][0]:
        t += 50 * MS
        sim.run_until(t)
    sim.run()
    stepped, whole = io.StringIO(), io.StringIO()
    sim.collector.records.write_csv(stepped)
    batch.requests.write_csv(whole)
    assert stepped.getvalue() == whole.getvalue()
