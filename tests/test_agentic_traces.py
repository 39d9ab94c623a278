"""Agentic traces (format agentic-mooncake): a hand-checked fan-out of three and fan-in, per-job
makespan and critical path, every backend, the refusals naming the line, fast against reference."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import servesim
from servesim.errors import ServesimError
from tests.support.equivalence import assert_same
from tests.support.runs import write_trace
from tests.support.scenarios import as_backend, scenarios
from tests.test_session_traces import SCHEDULERS

# A planner, three sub-agents started 100 ms after it (the third after a 50 ms tool call too),
# and a merge 20 ms after the last of them.
ROWS = [
    {"request_id": "plan", "timestamp": 0, "input_length": 40, "output_length": 4, "hash_ids": [1, 2, 3]},
    {"request_id": "sub-1", "wait_for": ["plan"], "delay": 100, "input_length": 60, "output_length": 2,
     "hash_ids": [1, 2, 11, 12]},
    {"request_id": "sub-2", "wait_for": ["plan"], "delay": 100, "input_length": 60, "output_length": 6,
     "hash_ids": [1, 2, 21, 22]},
    {"request_id": "sub-3", "wait_for": ["plan"], "delay": 100, "tool_wait_ms": 50, "input_length": 60,
     "output_length": 2, "hash_ids": [1, 2, 31, 32]},
    {"request_id": "merge", "wait_for": ["sub-1", "sub-2", "sub-3"], "delay": 20, "input_length": 100,
     "output_length": 3, "hash_ids": [1, 2, 3, 4, 5, 6, 7]},
]


def _config(trace, backend: str = "vllm", client: dict | None = None) -> dict:
    workload = {"trace": str(trace), "format": "agentic-mooncake", "trace_block_size": 16}
    if client is not None:
        workload["client"] = client
    return {"engine": {"backend": backend, "timing": {"kind": "fixed", "pass_ms": 10.0},
                       "workers": {"aggregated": {"scheduler": SCHEDULERS[backend]}}}, "workload": workload}


def test_a_fan_out_of_three_and_a_fan_in_by_hand(tmp_path):
    result = servesim.simulate(_config(write_trace(tmp_path / "t.jsonl", ROWS)))
    times = [(r.request_id, r.arrival_ns // 10**6, r.first_token_ns // 10**6, r.finish_ns // 10**6, r.cached_tokens)
             for r in result.requests]
    # plan: [0, 10) prefill, 4 tokens by 40. Its 40 tokens fill 2 blocks of 16 keyed by hash_ids
    # [1] and [1, 2], which every later prompt starts with: 32 cached tokens each.
    # sub-1 and sub-2 at 40 + 100 = 140, prefilled together in [140, 150); sub-1's 2nd token at
    # 160, sub-2's 6th at 200. sub-3 at 40 + 100 + 50 = 190, the instant a pass ends and the next
    # is scheduled: first token 200, second 210. merge waits for the last, sub-3 at 210: sent at
    # 230, first token 240, its 3rd at 260.
    assert times == [(0, 0, 10, 40, 0), (1, 140, 150, 160, 32), (2, 140, 150, 200, 32), (3, 190, 200, 210, 32),
                     (4, 230, 240, 260, 32)]
    out = io.StringIO()
    result.jobs.write_csv(out)
    # One job, 0 to 260 ms. The critical path: merge waited longest on sub-3, which waited on
    # plan; serving 40 + 20 + 30 = 90 ms of it, the other 170 the delays (150 + 20).
    assert out.getvalue().splitlines()[1] == "0,5,5,true,0,260,260,plan;sub-3;merge,3,90,170"
    block = result.summary["agentic_jobs"]
    assert (block["num_jobs"], block["completed_jobs"], block["mean_makespan_ms"]) == (1, 1, 260.0)
    assert (block["mean_critical_path_requests"], block["mean_critical_path_wait_ms"]) == (3.0, 170.0)
    assert [r.trace_request_id for r in result.requests] == ["plan", "sub-1", "sub-2", "sub-3", "merge"]


def test_jobs_are_linked_requests_and_a_rejected_parent_leaves_its_job_incomplete(tmp_path):
    alone = {"request_id": "other", "timestamp": 5, "input_length": 20, "output_length": 2}
    big = dict(ROWS[2], input_length=2000, hash_ids=None)
    del big["hash_ids"]
    result = servesim.simulate(_config(write_trace(tmp_path / "t.jsonl", [ROWS[0], alone, ROWS[1], big, *ROWS[3:]])))
    # sub-2 (2,000 tokens) is refused, so merge is never sent: 5 of 6 requests have records.
    assert [r.trace_request_id for r in result.requests] == ["plan", "other", "sub-1", "sub-2", "sub-3"]
    block = result.summary["agentic_jobs"]
    assert (block["num_jobs"], block["completed_jobs"]) == (2, 1)   # the planner's job, and "other"


@pytest.mark.parametrize("backend", sorted(SCHEDULERS))
def test_every_backend_waits_for_the_last_parent(tmp_path, backend):
    result = servesim.simulate(_config(write_trace(tmp_path / "t.jsonl", ROWS), backend))
    records = list(result.requests)
    plan, subs, merge = records[0], records[1:4], records[4]
    assert [s.arrival_ns for s in subs] == [plan.finish_ns + 100 * 10**6] * 2 + [plan.finish_ns + 150 * 10**6]
    assert merge.arrival_ns == max(s.finish_ns for s in subs) + 20 * 10**6
    assert all(r.cached_tokens >= 32 for r in records[1:])


@pytest.mark.parametrize("row, says", [
    ({"request_id": "b", "wait_for": ["nobody"], "input_length": 5, "output_length": 2},
     "line 2: wait_for names 'nobody', which no earlier line's request_id is"),
    ({"request_id": "a", "timestamp": 1, "input_length": 5, "output_length": 2},
     "line 2: request_id 'a' is on an earlier line too"),
    ({"request_id": "b", "wait_for": ["a"], "timestamp": 3, "input_length": 5, "output_length": 2},
     "line 2: a row with wait_for is sent after what it waits for"),
    ({"request_id": "b", "delay": 3, "input_length": 5, "output_length": 2}, "line 2: a row without wait_for"),
    ({"request_id": "b", "wait_for": "a", "input_length": 5, "output_length": 2}, "line 2: wait_for must be"),
    ({"request_id": "b", "wait_for": ["a"], "priority": 1, "input_length": 5, "output_length": 2},
     "line 2: unknown field 'priority' for format agentic-mooncake"),
    ({"wait_for": ["a"], "input_length": 5, "output_length": 2}, "line 2: request_id is required"),
])
def test_bad_rows_are_refused_naming_the_line(tmp_path, row, says):
    first = {"request_id": "a", "timestamp": 0, "input_length": 5, "output_length": 2}
    with pytest.raises(ServesimError, match=says):
        servesim.simulate(_config(write_trace(tmp_path / "t.jsonl", [first, row])))


def test_the_sample_file_replays():
    sample = Path(__file__).resolve().parents[1] / "docs" / "examples" / "agentic_trace.jsonl"
    rows = [json.loads(line) for line in sample.read_text().splitlines() if line.strip()]
    result = servesim.simulate({"workload": {"trace": str(sample), "format": "agentic-mooncake"}})
    assert len(result.requests) == len(rows) and result.summary["agentic_jobs"]["completed_jobs"] == 2


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenarios(), st.sampled_from(["vllm", "sglang", "trtllm"]), st.data())
def test_fast_matches_reference_on_agentic_traces(tmp_path, scenario, backend, data):
    """The fast-engine tests' random traces, each row after the first waiting on some earlier ones."""
    rows, sched, client, trace_block_size = scenario
    for i, row in enumerate(rows):
        row["request_id"] = f"r{i}"
        if i and data.draw(st.booleans()):
            parents = data.draw(st.lists(st.integers(0, i - 1), min_size=1, max_size=3, unique=True))
            row["wait_for"] = [f"r{p}" for p in parents]
            del row["timestamp"]
            row["delay"] = data.draw(st.sampled_from([0, 0.25, 7.5, 40]))
    if client["mode"] == "closed_loop":
        client = {"mode": "bench", "max_concurrency": client["concurrency"]}
    trace = write_trace(tmp_path / "t.jsonl", rows)
    config = {"engine": {"backend": backend, "timing": {"kind": "fixed", "pass_ms": 10.0},
                         "workers": {"aggregated": {"scheduler": as_backend(sched, backend, data)}}},
              "workload": {"trace": str(trace), "format": "agentic-mooncake", "client": client,
                           "trace_block_size": trace_block_size}}
    assert_same(config)
