"""TensorRT-LLM's fast scheduler (engine/trtllm/fast.py: the decode pass in one loop, the
GUARANTEED_NO_EVICT reserve carried in closed form) against the reference scheduler, on random
workloads aggregated and disaggregated, with the carried reserve checked against a fresh sum
at every use."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim.engine.trtllm.fast import FusedTrtllmPasses
from servesim.engine.trtllm.group import FORM_AFTER, GroupedTrtllmPasses
from servesim.engine.trtllm.scheduler import TrtllmScheduler
from tests.support.equivalence import assert_same
from tests.support.runs import write_trace
from tests.support.scenarios import as_backend, scenarios

FIXED = {"kind": "fixed", "pass_ms": 10.0}
VARIED = {"kind": "polynomial", "base_ms": 1.5, "per_prefill_token_ms": 0.01, "per_decode_token_ms": 0.02,
          "per_context_token_ms": 0.001}


def _config(trace, sched, client, trace_block_size):
    return {
        "engine": {"backend": "trtllm", "timing": FIXED, "workers": {"aggregated": {"scheduler": sched}}},
        "workload": {"trace": str(trace), "format": "mooncake", "client": client,
                     "trace_block_size": trace_block_size},
    }


@pytest.fixture
def checked(monkeypatch) -> dict:
    """Counts of fused and reference passes and of reserves answered from the carried margin;
    every answer is checked against the reference's sum over the batch."""
    counts = {"fused": 0, "reference": 0, "carried": 0, "grouped": 0}
    reserved, schedule, reference_pass = (GroupedTrtllmPasses._reserved_blocks, FusedTrtllmPasses.schedule,
                                          FusedTrtllmPasses._reference_pass)
    grouped = GroupedTrtllmPasses._schedule_grouped

    def checked_reserve(self):
        if self._margin_key != self._reserve_state():
            return reserved(self)
        counts["carried"] += 1
        answer = reserved(self)
        margin, key = self._margin, self._margin_key
        self._margin_key = None   # summed afresh over the batch (members' blocks as they stand)
        assert answer == reserved(self)
        self._margin, self._margin_key = margin, key
        if not getattr(self, "group", None) or not self.group.members:
            assert answer == TrtllmScheduler._reserved_blocks(self)
        return answer

    def counted_schedule(self):
        before = self.reference_passes
        out = schedule(self)
        counts["reference" if self.reference_passes > before else "fused"] += 1
        return out

    def counted_grouped(self, step):
        out = grouped(self, step)
        if out is not None:
            counts["grouped"] += 1
        return out

    monkeypatch.setattr(GroupedTrtllmPasses, "_reserved_blocks", checked_reserve)
    monkeypatch.setattr(GroupedTrtllmPasses, "_schedule_grouped", counted_grouped)
    monkeypatch.setattr(FusedTrtllmPasses, "schedule", counted_schedule)
    monkeypatch.setattr(FusedTrtllmPasses, "_reference_pass", reference_pass)
    return counts


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenarios(), st.data())
def test_fast_scheduler_matches_the_reference(tmp_path, checked, scenario, data):
    rows, sched, client, trace_block_size = scenario
    sched = as_backend(sched, "trtllm", data)
    if data.draw(st.booleans()):
        sched["batch_wait_timeout_iters"] = data.draw(st.sampled_from([0, 2]))
    assert_same(_config(write_trace(tmp_path / "t.jsonl", rows), sched, client, trace_block_size))


@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenarios(), st.data())
def test_fast_scheduler_matches_the_reference_disaggregated(tmp_path, checked, scenario, data):
    """Decode workers receive their requests' blocks by transfer, prefill workers hold them for it."""
    rows, sched, client, trace_block_size = scenario
    sched = as_backend(sched, "trtllm", data)
    config = _config(write_trace(tmp_path / "t.jsonl", rows), sched, client, trace_block_size)
    config["engine"]["workers"] = {"prefill": {"count": 1, "scheduler": dict(sched)},
                                   "decode": {"count": data.draw(st.sampled_from([1, 2])), "scheduler": dict(sched)}}
    latency_ms, bandwidth_gb_s = data.draw(st.sampled_from([(0.5, 50.0), (17.0, 1.0)]))
    config["engine"]["kv_transfer"] = {"bandwidth_gb_s": bandwidth_gb_s, "latency_ms": latency_ms}
    assert_same(config)


def _rows(n: int, prompt: int, output: int, gap_ms: float) -> list[dict]:
    return [{"timestamp": i * gap_ms, "input_length": prompt, "output_length": output} for i in range(n)]


@pytest.mark.parametrize("overlap_off", [False, True])
def test_guaranteed_admission_reads_the_carried_reserve(tmp_path, checked, overlap_off):
    """6 requests of 40 + 24 tokens, one every 5 ms, blocks of 8, a pool of 24 blocks (192 tokens).

    GUARANTEED_NO_EVICT reserves each admitted request's whole sequence: ceil(64 / 8) = 8 blocks,
    so three fit (3 · 8 = 24) and the fourth waits for a finish. Every pass with requests waiting
    asks for the reserve; all but the first ask after an admission or a finish, whose change the
    margin carries, so most answers are carried (each checked against the sum). Request 0's
    first token comes from its 10 ms prefill and its 24th 23 passes later, at 240 ms; request 3
    is scheduled in the pass after that finish (at 240 ms without overlap; with overlap the pass
    at 240 ms was committed before the finish came back, so at 250 ms).
    """
    sched = {"tokens_per_block": 8, "max_tokens": 192, "max_seq_len": 64, "max_batch_size": 8,
             "max_num_tokens": 64, "disable_overlap_scheduler": overlap_off}
    config = _config(write_trace(tmp_path / "t.jsonl", _rows(6, 40, 24, 5.0)), sched, {"mode": "open_loop"}, 8)
    fast = assert_same(config)
    assert fast.summary["completed"] == 6
    assert checked["fused"] > 0 and checked["carried"] > 0
    first, fourth = fast.requests[0], fast.requests[3]
    assert (first.first_token_ns, first.finish_ns) == (10_000_000, 240_000_000)
    assert fourth.first_scheduled_ns == 240_000_000 + (0 if overlap_off else 10_000_000)


def test_a_prompt_mid_way_takes_the_reference_path(tmp_path, checked):
    """Chunked context with a budget of 16 tokens: a 40-token prompt takes three passes (16, 16,
    8), during which it is a context request, not a generation one, so those passes take the
    reference's path; the decode passes after it are fused."""
    sched = {"tokens_per_block": 8, "max_tokens": 512, "max_seq_len": 128, "max_batch_size": 4,
             "max_num_tokens": 16, "enable_chunked_context": True}
    config = _config(write_trace(tmp_path / "t.jsonl", _rows(2, 40, 6, 0.0)), sched, {"mode": "open_loop"}, 8)
    fast = assert_same(config)
    assert fast.summary["completed"] == 2
    assert checked["reference"] > 0 and checked["fused"] > 0


def test_max_utilization_pauses_take_the_reference_path(tmp_path, checked):
    """MAX_UTILIZATION with a pool of 10 blocks of 4 tokens for 3 requests of 8 + 12 tokens (5
    blocks each at the end): the batch runs short and the newest is paused; the pass that pauses
    goes the reference's way, and the records match the reference's."""
    sched = {"tokens_per_block": 4, "max_tokens": 40, "max_seq_len": 32, "max_batch_size": 4,
             "max_num_tokens": 32, "capacity_scheduler_policy": "MAX_UTILIZATION"}
    config = _config(write_trace(tmp_path / "t.jsonl", _rows(3, 8, 12, 0.0)), sched, {"mode": "open_loop"}, 4)
    fast = assert_same(config)
    assert fast.summary["preemptions"] > 0
    assert checked["reference"] > 0 and checked["fused"] > 0


@st.composite
def busy_scenarios(draw):
    """Batches of up to 48 generation requests that the group holds: closed loops of 4-40, long
    outputs, GUARANTEED_NO_EVICT pools from tight to roomy, token budgets that sometimes cut the
    generation requests (the group is dissolved), chunked context, overlap, shared prefixes."""
    block = draw(st.sampled_from([4, 8, 16]))
    max_len = draw(st.sampled_from([128, 256]))
    chunked = draw(st.booleans())
    batch = draw(st.integers(2, 48))
    budget = draw(st.integers(8, 400))
    if not chunked:
        budget = max(budget, max_len)
    sched = {"tokens_per_block": block, "max_seq_len": max_len, "max_batch_size": batch,
             "max_tokens": block * draw(st.integers(max_len // block, 12 * max_len // block)),
             "max_num_tokens": max(budget, block), "enable_chunked_context": chunked,
             "enable_block_reuse": draw(st.booleans()), "disable_overlap_scheduler": draw(st.booleans())}
    rows = []
    t = 0.0
    for _ in range(draw(st.integers(10, 90))):
        t += draw(st.sampled_from([0.0, 0.0, 1.0, 10.0, 33.3]))
        row = {"timestamp": round(t, 3), "input_length": draw(st.integers(1, max_len // 2)),
               "output_length": draw(st.integers(1, max_len // 2))}
        if draw(st.booleans()):
            row["hash_ids"] = draw(st.lists(st.integers(0, 3), min_size=1, max_size=4))
        rows.append(row)
    client = draw(st.sampled_from([{"mode": "open_loop"},
                                   {"mode": "closed_loop", "concurrency": draw(st.integers(4, 40))}]))
    return rows, sched, client, draw(st.sampled_from([block, 16]))


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(busy_scenarios(), st.booleans(), st.booleans())
def test_group_matches_the_reference_on_busy_batches(tmp_path, checked, scenario, warmup, varied):
    """With fixed passes, and with passes whose duration follows the batch's tokens and context
    (the group's totals feed the step-time model)."""
    rows, sched, client, trace_block_size = scenario
    config = _config(write_trace(tmp_path / "t.jsonl", rows), sched, client, trace_block_size)
    if varied:
        config["engine"]["timing"] = VARIED
    if warmup:
        config["workload"]["warmup_requests"] = len(rows) // 4
    assert_same(config)


@pytest.mark.parametrize("overlap_off", [False, True])
def test_generation_requests_run_as_a_group(tmp_path, checked, overlap_off):
    """6 requests of 8 + 5 tokens at t=0, a budget of 16 tokens, fixed 10 ms passes.

    Pass 1 admits r0 and r1 (8 + 8 = 16). Each later pass takes its generation requests first,
    one token each, and the budget left admits one more prompt while 8 fit: pass 2 decodes 2
    and admits r2 (2 + 8 <= 16), pass 3 decodes 3 and admits r3, pass 4 r4, pass 5 r5. From the
    third pass in a row that admits (FORM_AFTER), the generation requests are held as a group:
    passes 3, 4 and 5. r0 and r1 get their five tokens at 10, 20, 30, 40 and 50 ms; r2..r5
    start a pass later each and finish 10 ms apart.
    """
    sched = {"tokens_per_block": 4, "max_tokens": 512, "max_seq_len": 64, "max_batch_size": 8,
             "max_num_tokens": 16, "disable_overlap_scheduler": overlap_off}
    config = _config(write_trace(tmp_path / "t.jsonl", _rows(6, 8, 5, 0.0)), sched, {"mode": "open_loop"}, 4)
    fast = assert_same(config)
    ms = 1_000_000
    assert [(r.first_scheduled_ns, r.first_token_ns, r.finish_ns) for r in fast.requests] == [
        (0, 10 * ms, 50 * ms), (0, 10 * ms, 50 * ms), (10 * ms, 20 * ms, 60 * ms),
        (20 * ms, 30 * ms, 70 * ms), (30 * ms, 40 * ms, 80 * ms), (40 * ms, 50 * ms, 90 * ms)]
    assert FORM_AFTER == 3 and checked["grouped"] == 3


def test_a_prompts_last_token_is_not_a_group_decode(tmp_path, checked):
    """Chunked context, a budget of 16 and prompts of 17 tokens: each prompt's last token is
    computed alone (17 = 16 + 1) by a pass that counts it as a prefill chunk, not a decode; the
    group leaves such a pass to the per-request path, and the records match the reference's."""
    sched = {"tokens_per_block": 4, "max_tokens": 512, "max_seq_len": 64, "max_batch_size": 8,
             "max_num_tokens": 16, "enable_chunked_context": True}
    config = _config(write_trace(tmp_path / "t.jsonl", _rows(4, 17, 6, 0.0)), sched, {"mode": "open_loop"}, 4)
    config["engine"]["timing"] = VARIED   # a decode and a prefill chunk take different times here
    fast = assert_same(config)
    assert fast.summary["completed"] == 4
    assert checked["grouped"] > 0 and checked["fused"] > 0
