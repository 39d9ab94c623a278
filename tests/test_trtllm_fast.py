"""TensorRT-LLM's fast scheduler (engine/trtllm/fast.py: the decode pass in one loop, the
GUARANTEED_NO_EVICT reserve carried in closed form) against the reference scheduler, on random
workloads aggregated and disaggregated, with the carried reserve checked against a fresh sum
at every use."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim.engine.trtllm.fast import FusedTrtllmPasses
from servesim.engine.trtllm.scheduler import TrtllmScheduler
from tests.support.equivalence import assert_same
from tests.support.runs import write_trace
from tests.support.scenarios import as_backend, scenarios

FIXED = {"kind": "fixed", "pass_ms": 10.0}


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
    counts = {"fused": 0, "reference": 0, "carried": 0}
    reserved, schedule, reference_pass = (FusedTrtllmPasses._reserved_blocks, FusedTrtllmPasses.schedule,
                                          FusedTrtllmPasses._reference_pass)

    def checked_reserve(self):
        if self._margin_key == self._reserve_state():
            counts["carried"] += 1
        answer = reserved(self)
        assert answer == TrtllmScheduler._reserved_blocks(self)
        return answer

    def counted_schedule(self):
        before = self.reference_passes
        out = schedule(self)
        counts["reference" if self.reference_passes > before else "fused"] += 1
        return out

    monkeypatch.setattr(FusedTrtllmPasses, "_reserved_blocks", checked_reserve)
    monkeypatch.setattr(FusedTrtllmPasses, "schedule", counted_schedule)
    monkeypatch.setattr(FusedTrtllmPasses, "_reference_pass", reference_pass)
    return counts


@settings(max_examples=100, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenarios(), st.data())
def test_fast_scheduler_matches_the_reference(tmp_path, checked, scenario, data):
    rows, sched, client, trace_block_size = scenario
    sched = as_backend(sched, "trtllm", data)
    if data.draw(st.booleans()):
        sched["batch_wait_timeout_iters"] = data.draw(st.sampled_from([0, 2]))
    assert_same(_config(write_trace(tmp_path / "t.jsonl", rows), sched, client, trace_block_size))


@settings(max_examples=30, deadline=None, derandomize=True,
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
