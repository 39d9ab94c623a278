"""SGLang's decode pass in one visit per request (engine/sglang/fused_decode.py) and the run
check's sums it makes: against the reference scheduler (row 2s in small, random retracting
workloads with and without overlap), every use of the sums against the loop over the batch they
replace, and a hand-counted pass."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim.engine.decode_runs import DecodeRuns
from servesim.engine.request import Status
from servesim.engine.sglang import fused_decode
from servesim.engine.sglang.fast import FastSglangScheduler
from tests.support.equivalence import assert_same
from tests.support.runs import write_trace
from tests.test_sglang_behind import _row_2s_small
from tests.test_sglang_retract_runs import _config, _retracting

_RUN_STATE = ("_run_deficit", "_run_context", "_run_start", "_run_latest")


def _check_fused(monkeypatch) -> dict:
    """Fused passes made, and run checks that used their sums; each such check is run again
    with the loop over the batch (`DecodeRuns._quiet_pages`) and must give the same run and
    leave the same run state."""
    counts = {"fused": 0, "sums": 0}
    made, pages = fused_decode.fused_decode_pass, FastSglangScheduler._quiet_pages

    def counted_made(scheduler):
        counts["fused"] += 1
        return made(scheduler)

    def checked_pages(self, entries, limit, now):
        used = self._quiet_sums is not None and self._quiet_sums.entries is entries
        steps = pages(self, entries, limit, now)
        if used:
            counts["sums"] += 1
            assert self._quiet_sums is None
            state = [getattr(self, name) for name in _RUN_STATE]
            assert DecodeRuns._quiet_pages(self, entries, limit, now) == steps
            if steps:
                assert [getattr(self, name) for name in _RUN_STATE] == state
        return steps

    monkeypatch.setattr("servesim.engine.sglang.fast.fused_decode_pass", counted_made)
    monkeypatch.setattr(FastSglangScheduler, "_quiet_pages", checked_pages)
    return counts


def test_row_2s_in_small_makes_fused_passes_and_runs_from_their_sums(tmp_path, monkeypatch):
    """With and without retractions: fused passes are made, their sums start runs, every such run
    is the loop's, and the outputs are the reference's."""
    for pool, ratio in ((900, 0.1), (4000, 0.7)):
        counts = _check_fused(monkeypatch)
        fast = assert_same(_row_2s_small(tmp_path, pool, ratio))
        assert (fast.summary["preemptions"] > 0) == (pool == 900)
        assert counts["fused"] >= 5 and counts["sums"] >= 5
        monkeypatch.undo()


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_retracting(), st.booleans(), st.booleans())
def test_random_workloads_match_the_reference(tmp_path, monkeypatch, scenario, overlap, caching):
    rows, sched, client = scenario
    sched = dict(sched, disable_overlap_schedule=not overlap, disable_radix_cache=not caching)
    _check_fused(monkeypatch)
    assert_same(_config(write_trace(tmp_path / "t.jsonl", rows), sched, client))


def test_random_workloads_reach_the_fused_pass(tmp_path, monkeypatch):
    """The random workloads above do make fused passes and use their sums (not only row 2s)."""
    counts = _check_fused(monkeypatch)

    @settings(max_examples=12, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(_retracting())
    def run(scenario):
        rows, sched, client = scenario
        assert_same(_config(write_trace(tmp_path / "t.jsonl", rows), dict(sched, disable_overlap_schedule=False),
                            client))

    run()
    assert counts["fused"] > 0 and counts["sums"] > 0


class _Kv:
    """One-token pages handed out from 100 up; caching marks recorded."""

    block_size = 1
    enable_caching = True

    def __init__(self, free: int) -> None:
        self.num_free = free
        self.next = 100
        self.marked = []

    def take(self, count, into):
        into.extend(range(self.next, self.next + count))
        self.next += count
        self.num_free -= count

    def cache_full_blocks(self, request, tokens):
        self.marked.append((request.request_id, tokens, len(request.blocks)))


def _request(rid, prompt, computed, held, output, placeholders, in_flight, max_tokens=50, shared=0):
    return SimpleNamespace(request_id=rid, prompt_len=prompt, num_computed=computed, blocks=list(range(held)),
                           num_output=output, placeholders=placeholders, in_flight=in_flight, max_tokens=max_tokens,
                           stale=0, num_cached_blocks=computed - placeholders, keys=SimpleNamespace(shared_blocks=shared),
                           is_prefill_chunk=False, status=Status.RUNNING)


def test_a_hand_counted_pass():
    """Overlap on, a 100-token context limit, 10 free pages, four running requests:
    a (prompt 10, computed 15, 15 pages, 5 outputs, one in flight): decodes, one page;
    b (prompt 20, computed 20, 22 pages, just prefilled, its first token in flight): decodes on a spare page,
      its outputs read again at the check;
    c (prompt 10, computed 59, 59 pages, 49 outputs, max 50): its last token is in flight, it sits out;
    d (prompt 30, computed 39, 39 pages, 10 outputs, nothing in flight, shareable prefix of 41 blocks
      not yet cached): one page, and its caching mark waits until the pages are given out."""
    a = _request(1, 10, 15, 15, 5, 1, 1)
    b = _request(2, 20, 20, 22, 0, 1, 1)
    c = _request(3, 10, 59, 59, 49, 1, 1)
    d = _request(4, 30, 39, 39, 10, 0, 0, shared=41)
    d.num_cached_blocks = 38
    scheduler = SimpleNamespace(kv=_Kv(10), running=[a, b, c, d], async_scheduling=True, max_model_len=100,
                                new_token_ratio=0.5, decay=0.1, min_ratio=0.2, _quiet_sums=None)
    assert fused_decode.fused_applies(scheduler)
    out = fused_decode.fused_decode_pass(scheduler)
    assert [e.request for e in out.entries] == [a, b, d] and out.num_tokens == 3
    assert [e.computed_before for e in out.entries] == [15, 20, 39]
    assert a.blocks[-1] == 100 and d.blocks[-1] == 101 and len(b.blocks) == 22   # batch order, b on its spare
    assert scheduler.kv.marked == [(4, 40, 40)]   # d's mark (min(40, 30 + 10)) after its page came
    assert a.num_cached_blocks == 15 and (a.num_computed, a.in_flight, a.placeholders) == (16, 2, 2)
    assert abs(scheduler.new_token_ratio - 0.4) < 1e-12
    sums = scheduler._quiet_sums
    # cap: a 50 - 5 = 45, d 50 - 10 = 40 (b rechecked later); context 16 + 21 + 40; deficit: b has one spare.
    assert (sums.cap, sums.context, sums.deficit, sums.latest, sums.ahead) == (40, 77, -1, 40, True)
    assert sums.recheck == [a, b] and sums.valid
    b.num_output = 1   # its first token's output, processed before the check
    b.max_tokens = 30
    assert fused_decode.quiet_sums(scheduler, out.entries, 1 << 40) == (29, 77, -1, 40, True)
    assert fused_decode.quiet_sums(scheduler, out.entries, 1 << 40) is None   # used once


def test_no_fused_pass_where_a_retraction_or_the_context_limit_could_come():
    a = _request(1, 10, 15, 15, 5, 0, 0)
    b = _request(2, 10, 99, 99, 5, 0, 0)
    for running, free, max_len in (([a, b], 1, 200), ([a, b], 2, 99), ([], 5, 100)):
        scheduler = SimpleNamespace(kv=_Kv(free), running=running, max_model_len=max_len)
        assert not fused_decode.fused_applies(scheduler)
    assert fused_decode.fused_applies(SimpleNamespace(kv=_Kv(2), running=[a, b], max_model_len=100))
