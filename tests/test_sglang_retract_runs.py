"""SGLang's decode runs that start at a retraction (engine/sglang/retract_runs.py): the next call's
prefill try settled as the run starts, held to `_prefill_pass` on hand-built states and to the
reference scheduler, pass log by pass log, on random workloads that retract; and their outputs,
summary KV timeline included, equal to those of the fast engine without such runs."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import servesim

from servesim.engine.kv.cache import KvCache
from servesim.engine.request import Request
from servesim.engine.sglang.fast import FastSglangScheduler
from servesim.engine.sglang.retract_runs import next_prefill_fails
from servesim.engine.sglang.scheduler import CLIP_MAX_NEW_TOKENS, SglangScheduler
from tests.support.equivalence import assert_same
from tests.support.runs import write_trace
from tests.test_pass_logs import assert_same_pass_logs

FIXED = {"kind": "fixed", "pass_ms": 10.0}


def _state(free: int, output: int = 4, max_running: int = 8, overlap: bool = True) -> SglangScheduler:
    """Two running requests (max 20 tokens, `output` generated), one waiting (10-token prompt,
    max 20): a pool of one-token pages with `free` pages free; new_token_ratio 0.5."""
    kv = KvCache(100, 1, False, 1000, 0, False)
    kv.take(kv.num_free - free, [])
    scheduler = SglangScheduler(kv, max_running, None, 64, "fcfs", False, 0.5, 0.1, 0.01, 1000, overlap)
    for i in range(2):
        request = Request(i, 0, 0, 10, 20, 20, None)
        request.num_output = output
        scheduler.running.append(request)
    scheduler.waiting.append(Request(2, 0, 0, 10, 20, 20, None))
    return scheduler


def _reference_try_fails(scheduler: SglangScheduler) -> bool:
    """The reference's own try on a copy: nothing admitted and the batch marked full."""
    other = copy.deepcopy(scheduler)
    return other._prefill_pass() is None and other.batch_is_full


@pytest.mark.parametrize("free,ahead,fails", [
    # reserved = (20 - 4) · 2 · 0.5 = 16 tokens; the head needs 10 + 20 = 30 < 50 - 16 = 34: admitted.
    (50, 0, False),
    # 30 >= 46 - 16 = 30: refused at equality, the batch marked full.
    (46, 0, True),
    # Without overlap each running request has one more token by then: (20 - 5) · 2 · 0.5 = 15,
    # and 30 < 46 - 15 = 31: admitted.
    (46, 1, False),
    (45, 1, True),   # 30 >= 45 - 15
])
def test_next_prefill_try_matches_the_reference(free, ahead, fails):
    scheduler = _state(free)
    assert next_prefill_fails(scheduler, ahead, CLIP_MAX_NEW_TOKENS) is fails
    # The state the next call sees: without overlap, this pass's tokens delivered first.
    seen = _state(free, output=4 + ahead)
    assert _reference_try_fails(seen) is fails


def test_next_prefill_try_at_the_running_limit_and_where_it_is_not_settled():
    # Two running of at most 2: the batch is full, whatever the pool.
    assert next_prefill_fails(_state(100, max_running=2), 0, CLIP_MAX_NEW_TOKENS)
    assert _reference_try_fails(_state(100, max_running=2))
    mixed = _state(0)
    mixed.enable_mixed_chunk = True
    assert not next_prefill_fails(mixed, 0, CLIP_MAX_NEW_TOKENS)   # mixed decodes change the budget: not settled here
    empty = _state(0)
    empty.waiting.clear()
    assert not next_prefill_fails(empty, 0, CLIP_MAX_NEW_TOKENS)   # nothing to try (the caller treats that as quiet)


def _config(trace, sched, client):
    return {
        "engine": {"backend": "sglang", "timing": FIXED, "workers": {"aggregated": {"scheduler": sched}}},
        "workload": {"trace": str(trace), "format": "mooncake", "client": client, "trace_block_size": 4},
    }


def _without_retraction_runs(config) -> dict:
    """The fast engine's summary with runs only where they started before: no run from a pass
    that retracted or whose next call tries a prefill."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(FastSglangScheduler, "_runs_past_preemption", lambda self, decided: False)
        patch.setattr("servesim.engine.sglang.fast.next_prefill_fails", lambda *args: False)
        return servesim.simulate(copy.deepcopy(config))


def assert_same_as_without(config, fast) -> None:
    """Whole summaries equal (KV timeline and mean included), but for the wall clock."""
    before = _without_retraction_runs(config)
    assert fast.requests == before.requests
    drop = ("wall_time_ms",)
    assert {k: v for k, v in fast.summary.items() if k not in drop} == \
        {k: v for k, v in before.summary.items() if k not in drop}


def _count_retraction_runs(monkeypatch) -> dict:
    """Counts of runs made whose first pass retracted."""
    counts = {"runs": 0}
    extend = FastSglangScheduler.extend

    def counted(self, decided, steps, *args, **kwargs):
        if decided.preempted:
            counts["runs"] += 1
        return extend(self, decided, steps, *args, **kwargs)

    monkeypatch.setattr(FastSglangScheduler, "extend", counted)
    return counts


def test_a_run_starts_at_a_retraction(tmp_path, monkeypatch):
    """Row 2s in small: a closed loop of 16 over 48 requests of 32 + 64 tokens in 900 one-token
    pages (16 · 96 = 1,536 at most). Decode passes run out twice and retract; each retraction pass
    starts a run, with overlap and without, and the records and summary match the reference's."""
    counts = _count_retraction_runs(monkeypatch)
    rows = [{"timestamp": 0, "input_length": 32, "output_length": 64, "hash_ids": [1000 + i]} for i in range(48)]
    for overlap_off in (False, True):
        before = counts["runs"]
        sched = {"page_size": 1, "context_length": 128, "max_total_tokens": 900, "max_running_requests": 64,
                 "chunked_prefill_size": 256, "max_prefill_tokens": 256, "disable_overlap_schedule": overlap_off,
                 "num_reserved_decode_tokens": 0}
        config = _config(write_trace(tmp_path / f"t{overlap_off}.jsonl", rows), sched,
                         {"mode": "closed_loop", "concurrency": 16})
        fast = assert_same(config)
        assert fast.summary["preemptions"] == 2
        assert counts["runs"] - before == 2
        assert_same_as_without(config, servesim.simulate(copy.deepcopy(config)))   # assert_same drops KV samples


@st.composite
def _retracting(draw):
    """SGLang workloads whose pools hold about half of what their requests need at once."""
    page = draw(st.sampled_from([1, 1, 4]))
    n = draw(st.integers(6, 16))
    rows = []
    t = 0.0
    for i in range(n):
        t += draw(st.sampled_from([0.0, 0.0, 0.0, 10.0, 35.5]))
        rows.append({"timestamp": round(t, 3), "input_length": draw(st.integers(4, 40)),
                     "output_length": draw(st.integers(8, 200)),
                     "hash_ids": [draw(st.integers(0, 3)), 100 + i]})
    need = sum(r["input_length"] + r["output_length"] for r in rows)
    pool = -(-max(need * draw(st.integers(20, 60)) // 100, 256) // page) * page   # the context must fit
    sched = {
        "page_size": page, "context_length": 256, "max_total_tokens": pool,
        "max_running_requests": draw(st.integers(2, 16)),
        "chunked_prefill_size": draw(st.sampled_from([16, 64, -1])),
        "max_prefill_tokens": draw(st.sampled_from([48, 128])),
        "disable_radix_cache": draw(st.booleans()),
        "disable_overlap_schedule": draw(st.booleans()),
        "schedule_policy": draw(st.sampled_from(["fcfs", "lpm"])),
        "enable_mixed_chunk": draw(st.sampled_from([False, False, True])),
        "new_token_ratio_decay": draw(st.sampled_from([0.05, 0.2, 0.0010033])),
        # A low ratio admits more than the pool can decode: SGLang then retracts.
        "init_new_token_ratio": draw(st.sampled_from([0.1, 0.3, 0.7])),
        "min_new_token_ratio": draw(st.sampled_from([0.02, 0.098])),
        "num_reserved_decode_tokens": 0,
        "scheduler_recv_interval": draw(st.sampled_from([1, 1, 3])),
    }
    client = draw(st.sampled_from([{"mode": "open_loop"}, {"mode": "closed_loop", "concurrency": 4},
                                   {"mode": "closed_loop", "concurrency": 12}]))
    return rows, sched, client


@settings(max_examples=70, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_retracting())
def test_retracting_workloads_match_the_reference_pass_by_pass(tmp_path, monkeypatch, scenario):
    rows, sched, client = scenario
    config = _config(write_trace(tmp_path / "t.jsonl", rows), sched, client)
    config["workload"]["warmup_requests"] = 1
    assert_same_pass_logs(config, monkeypatch)
    assert_same_as_without(config, servesim.simulate(copy.deepcopy(config)))


@settings(max_examples=25, deadline=None, derandomize=True)
@given(_retracting(), st.sampled_from([1, 2]), st.sampled_from([(0.5, 50.0), (17.0, 1.0)]))
def test_retracting_decode_workers_match_the_reference(scenario, decoders, transfer):
    """P/D: the decode workers retract (their pools as small as above), and with overlap commit
    the next pass at each pass end (`handoff_admission: next_pass`)."""
    import tempfile
    from pathlib import Path

    rows, sched, client = scenario
    with tempfile.TemporaryDirectory() as tmp:
        config = _config(write_trace(Path(tmp) / "t.jsonl", rows), sched, client)
        prefill = dict(sched, max_total_tokens=max(sched["max_total_tokens"], 2048))
        config["engine"]["workers"] = {"prefill": {"count": 1, "scheduler": prefill},
                                       "decode": {"count": decoders, "scheduler": sched}}
        config["engine"]["kv_transfer"] = {"latency_ms": transfer[0], "bandwidth_gb_s": transfer[1]}
        assert_same(config)
        assert_same_as_without(config, servesim.simulate(copy.deepcopy(config)))
