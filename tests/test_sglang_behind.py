"""The decode pass behind an SGLang run, committed with the run (engine/sglang/behind.py), against
the reference scheduler pass log by pass log (row 2s in small, random workloads with overlap),
against the fast engine without it (whole summaries, KV timeline included), and its guards: a
worker whose call behind a run comes at the run's end does not use it, and a change to the
scheduler before the pass is handed over is refused."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import servesim
from servesim.engine.decode_runs import DecodeRuns
from servesim.engine.passes import PassEntry, SchedulerOutput
from servesim.engine.sglang import behind
from servesim.engine.sglang.fast import FastSglangScheduler
from tests.support.equivalence import assert_same
from tests.support.runs import write_trace
from tests.test_pass_logs import assert_same_pass_logs
from tests.test_sglang_retract_runs import _config, _retracting


def _count_behind(monkeypatch) -> dict:
    """Runs made with their pass behind, and passes handed over by `schedule`."""
    counts = {"made": 0, "handed": 0}
    made, schedule = behind.extend_with_behind, FastSglangScheduler.schedule

    def counted_made(*args):
        counts["made"] += 1
        return made(*args)

    def counted_schedule(self):
        if self._behind is not None:
            counts["handed"] += 1
        return schedule(self)

    monkeypatch.setattr("servesim.engine.sglang.fast.extend_with_behind", counted_made)
    monkeypatch.setattr(FastSglangScheduler, "schedule", counted_schedule)
    return counts


def _without_behind(config):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("servesim.engine.sglang.fast.can_extend_with_behind", lambda *args: False)
        return servesim.simulate(copy.deepcopy(config))


def assert_same_as_without_behind(config) -> None:
    fast = servesim.simulate(copy.deepcopy(config))
    before = _without_behind(config)
    assert fast.requests == before.requests
    drop = ("wall_time_ms",)
    assert {k: v for k, v in fast.summary.items() if k not in drop} == \
        {k: v for k, v in before.summary.items() if k not in drop}


def _row_2s_small(tmp_path, pool: int, ratio: float = 0.7):
    """A closed loop of 16 over 48 requests of 32 + 40..80 tokens in `pool` one-token pages, overlap on."""
    rows = [{"timestamp": 0, "input_length": 32, "output_length": 40 + i * 7 % 41, "hash_ids": [1000 + i]}
            for i in range(48)]
    sched = {"page_size": 1, "context_length": 128, "max_total_tokens": pool, "max_running_requests": 64,
             "chunked_prefill_size": 256, "max_prefill_tokens": 256, "num_reserved_decode_tokens": 0,
             "init_new_token_ratio": ratio}   # a low ratio admits more than the pool can decode
    return _config(write_trace(tmp_path / f"t{pool}.jsonl", rows), sched, {"mode": "closed_loop", "concurrency": 16})


def test_the_pass_behind_each_run_is_made_with_it(tmp_path, monkeypatch):
    """Row 2s in small, with and without retractions: every pass behind a run is made with the run
    and handed over, and the pass logs, records and summaries match the reference's and those of
    the fast engine that decides that pass at its own call."""
    for pool in (900, 4000):
        counts = _count_behind(monkeypatch)
        config = _row_2s_small(tmp_path, pool, 0.1 if pool == 900 else 0.7)
        fast = assert_same(config)
        assert (fast.summary["preemptions"] > 0) == (pool == 900)
        assert counts["made"] >= 5 and counts["handed"] == counts["made"]
        assert_same_pass_logs(config, monkeypatch)
        assert_same_as_without_behind(config)
        monkeypatch.undo()


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_retracting(), st.booleans())
def test_workloads_with_overlap_match_the_reference_pass_by_pass(tmp_path, monkeypatch, scenario, caching):
    rows, sched, client = scenario
    sched = dict(sched, disable_overlap_schedule=False, disable_radix_cache=not caching)
    config = _config(write_trace(tmp_path / "t.jsonl", rows), sched, client)
    config["workload"]["warmup_requests"] = 1
    assert_same_pass_logs(config, monkeypatch)
    assert_same_as_without_behind(config)


def _random_overlapped_match_the_reference(tmp_path, examples: int) -> None:
    """`examples` random retracting workloads (derandomized), with overlap: outputs are the reference's."""

    @settings(max_examples=examples, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(_retracting())
    def run(scenario):
        rows, sched, client = scenario
        sched = dict(sched, disable_overlap_schedule=False)
        assert_same(_config(write_trace(tmp_path / "t.jsonl", rows), sched, client))

    run()


def test_random_workloads_make_passes_behind_runs(tmp_path, monkeypatch):
    """The random workloads above do reach the new path (not only the pinned case)."""
    counts = _count_behind(monkeypatch)

    _random_overlapped_match_the_reference(tmp_path, 15)
    assert counts["made"] > 0 and counts["handed"] == counts["made"]


def test_a_worker_that_decides_at_the_run_end_makes_no_pass_behind(tmp_path, monkeypatch):
    """P/D decode workers admitting handoffs at their next pass decide the pass behind a run at its
    end, when a transfer may have come: the scheduler is told so and makes none."""
    counts = _count_behind(monkeypatch)
    config = _row_2s_small(tmp_path, 4000)
    sched = config["engine"]["workers"]["aggregated"]["scheduler"]
    config["engine"]["workers"] = {"prefill": {"count": 1, "scheduler": sched},
                                   "decode": {"count": 1, "scheduler": sched}}
    config["engine"]["kv_transfer"] = {"latency_ms": 17.0, "bandwidth_gb_s": 1.0}
    assert_same(config)
    assert counts["made"] == 0


def test_a_change_before_the_pass_behind_is_handed_over_is_refused():
    scheduler = FastSglangScheduler.__new__(FastSglangScheduler)
    scheduler._behind = SchedulerOutput()
    with pytest.raises(RuntimeError, match="servesim bug"):
        scheduler.add_request(None)
    with pytest.raises(RuntimeError, match="servesim bug"):
        scheduler.add_transferred(None)


def _check_behind_shortcut(monkeypatch) -> dict:
    """Every run count asked of a pass behind a run with fewer free pages than two a request (the
    shortcut's condition in `FastSglangScheduler.quiet_steps`) is counted and checked against the
    full count (`DecodeRuns.quiet_steps`, the loop over the batch), which it must not have run."""
    counts = {"shortcut": 0, "loops": 0}
    quiet, pages = FastSglangScheduler.quiet_steps, DecodeRuns._quiet_pages

    def counted_pages(self, *args):
        counts["loops"] += 1
        return pages(self, *args)

    def checked_quiet(self, decided, limit, now):
        fires = decided is self._behind_exact and 2 * len(decided.entries) > self.kv.num_free
        loops = counts["loops"]
        steps = quiet(self, decided, limit, now)
        if fires:
            counts["shortcut"] += 1
            assert counts["loops"] == loops, "the shortcut's condition held but the loop ran"
            assert steps == 0 and DecodeRuns.quiet_steps(self, decided, limit, now) == 0
        return steps

    monkeypatch.setattr(DecodeRuns, "_quiet_pages", counted_pages)
    monkeypatch.setattr(FastSglangScheduler, "quiet_steps", checked_quiet)
    return counts


def test_a_pass_behind_short_of_pages_finds_no_run_without_the_loop(tmp_path, monkeypatch):
    """Row 2s in small retracts when the pages run out: the pass behind each such run has fewer
    free pages than two a request, and its count is settled at once; every such count is the
    full one's (0), and the outputs are the reference's (also on random retracting workloads)."""
    counts = _check_behind_shortcut(monkeypatch)
    config = _row_2s_small(tmp_path, 900, 0.1)
    assert_same(config)
    assert counts["shortcut"] >= 1
    shortcut = counts["shortcut"]

    _random_overlapped_match_the_reference(tmp_path, 25)
    assert counts["shortcut"] > shortcut


def test_decode_entries_made_without_their_constructor_have_every_field(tmp_path, monkeypatch):
    """`_commit_decodes` and `extend_with_behind` store a PassEntry's fields themselves (no
    __init__ call): every slot is set, with the types and ranges the constructor and the
    reference's marks give (the outputs are the reference's). Row 2s in small makes only sampling
    entries; a chunk's two stores (samples False, drafts 0) are the constructor's defaults."""
    seen = []
    schedule = FastSglangScheduler.schedule

    def kept_schedule(self):
        out = schedule(self)
        seen.extend(out.entries)
        return out

    monkeypatch.setattr(FastSglangScheduler, "schedule", kept_schedule)
    assert_same(_row_2s_small(tmp_path, 900, 0.1))
    assert len(seen) > 300
    for entry in seen:
        fields = {name: getattr(entry, name) for name in PassEntry.__slots__}
        assert fields["kind"] in ("running", "new", "resumed") and fields["tokens"] >= 1
        assert isinstance(fields["samples"], bool) and isinstance(fields["is_decode"], bool)
        assert fields["drafts"] == 0 and fields["computed_before"] >= 0


def test_plain_passes_deliver_in_bulk_as_the_reference_names_them(tmp_path, monkeypatch):
    """A plain pass's tokens to requests whose previous token came as it started go to the
    collector in aggregate (`FastSglangScheduler.update_from_output`): row 2s in small, retracting
    or not, with and without overlap, warm-up requests left out as the collector leaves them; the
    same records, ITL and summaries as the reference's named deliveries, and the bulk path ran
    (with named deliveries too: first tokens)."""
    counts = {"bulk": 0, "named": 0}
    outputs = FastSglangScheduler.update_from_output

    def counted_outputs(self, done):
        outputs(self, done)
        if done.run is None:
            counts["bulk"] += done.aggregate
            counts["named"] += len(done.delivered)

    monkeypatch.setattr(FastSglangScheduler, "update_from_output", counted_outputs)
    for pool, ratio in ((900, 0.1), (4000, 0.7)):
        for overlap_off in (False, True):
            config = _row_2s_small(tmp_path, pool, ratio)
            config["engine"]["workers"]["aggregated"]["scheduler"]["disable_overlap_schedule"] = overlap_off
            config["workload"]["warmup_requests"] = 3
            bulk = counts["bulk"]
            assert_same(config)
            assert counts["bulk"] > bulk
    assert counts["named"] > 0


def test_a_runs_outputs_are_settled_with_it(tmp_path, monkeypatch):
    """Without pass logs, `extend_with_behind` applies the run's own outputs as it makes the run, and
    its end (`settle_run_end`) makes only the finishes and cache-touching marks: row 2s in small
    (retracting or not, caching on and off) and random retracting workloads match the reference,
    every run with a pass behind was settled, and run ends finished requests there."""
    settled = []
    settle = behind.settle_run_end

    def counted_settle(scheduler, done, left):
        settle(scheduler, done, left)
        settled.append(len(done.finished))
        assert scheduler._settled is None

    monkeypatch.setattr("servesim.engine.sglang.fast.settle_run_end", counted_settle)
    counts = _count_behind(monkeypatch)
    for pool, ratio, caching in ((900, 0.1, True), (4000, 0.7, True), (4000, 0.7, False)):
        config = _row_2s_small(tmp_path, pool, ratio)
        config["engine"]["workers"]["aggregated"]["scheduler"]["disable_radix_cache"] = not caching
        assert_same(config)
    assert len(settled) == counts["made"] >= 15 and sum(settled) > 0
    made = counts["made"]
    _random_overlapped_match_the_reference(tmp_path, 15)
    assert counts["made"] > made and len(settled) == counts["made"]
