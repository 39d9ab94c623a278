"""Session traces (format mooncake-sessions, aiperf's multi-turn Mooncake JSON lines): a
hand-checked replay, every backend, the client rules, and the refusals naming the line."""

from __future__ import annotations

import json

import pytest

import servesim
from servesim.errors import ServesimError
from tests.support.runs import write_trace

# Session a: two turns, the second 500 ms after the first reaches the user; session b: one.
ROWS = [
    {"session_id": "a", "timestamp": 0, "input_length": 40, "output_length": 4, "hash_ids": [1, 2, 3]},
    {"session_id": "b", "timestamp": 5, "input_length": 20, "output_length": 2},
    {"session_id": "a", "delay": 500, "input_length": 150, "output_length": 4,
     "hash_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]},
]
SCHEDULERS = {
    "vllm": {"block_size": 16, "num_gpu_blocks": 1000, "max_model_len": 1024, "max_num_seqs": 16,
             "max_num_batched_tokens": 512, "async_scheduling": False},
    "sglang": {"page_size": 16, "context_length": 1024, "max_total_tokens": 16000},
    "trtllm": {"tokens_per_block": 16, "max_seq_len": 1024, "max_tokens": 16000},
}


def _config(trace, backend: str = "vllm", client: dict | None = None) -> dict:
    workload = {"trace": str(trace), "format": "mooncake-sessions", "trace_block_size": 16}
    if client is not None:
        workload["client"] = client
    return {"engine": {"backend": backend, "timing": {"kind": "fixed", "pass_ms": 10.0},
                       "workers": {"aggregated": {"scheduler": SCHEDULERS[backend]}}}, "workload": workload}


def _times(result) -> list[tuple]:
    return [(r.request_id, r.arrival_ns / 1e6, r.first_token_ns / 1e6, r.finish_ns / 1e6, r.cached_tokens)
            for r in result.requests]


def test_a_session_trace_by_hand(tmp_path):
    result = servesim.simulate(_config(write_trace(tmp_path / "t.jsonl", ROWS)))
    # a's turn 0 (40 tokens) is prefilled in [0, 10) and decodes to 40. b's (20 tokens, at 5)
    # joins the pass at 10: first token 20, its second at 30. a's turn 1 is sent 500 ms after
    # 40: at 540. Its hash_ids agree with turn 0's on [1, 2, 3]; turn 0's prompt of 40 tokens
    # covered 2 full blocks of 16 with them (the third ends at 48, past it), so 32 tokens hit;
    # the other 118 are prefilled in [540, 550); its 4th token comes at 580.
    assert _times(result) == [(0, 0.0, 10.0, 40.0, 0), (1, 5.0, 20.0, 30.0, 0), (2, 540.0, 550.0, 580.0, 32)]
    block = result.summary["sessions"]
    assert (block["num_sessions"], block["completed_sessions"], block["turns"]) == (2, 2, 3)
    assert block["mean_duration_ms"] == (580 + 25) / 2   # a: 0 to 580; b: 5 to 30
    assert block["prefix_cache_hit_rate_by_turn"] == [0.0, 32 / 150]
    assert result.summary["trace_format"] == "mooncake-sessions"


@pytest.mark.parametrize("backend", sorted(SCHEDULERS))
def test_every_backend_waits_for_the_turn_before(tmp_path, backend):
    result = servesim.simulate(_config(write_trace(tmp_path / "t.jsonl", ROWS), backend))
    first, _, second = list(result.requests)
    assert second.arrival_ns == first.finish_ns + 500 * 10**6 and second.cached_tokens == 32


def test_first_turns_follow_a_poisson_client_and_a_semaphore(tmp_path):
    trace = write_trace(tmp_path / "t.jsonl", [{k: v for k, v in row.items() if k != "timestamp"} for row in ROWS])
    result = servesim.simulate(_config(trace, client={"mode": "bench", "max_concurrency": 1}))
    # One request at a time, every session due at 0: a0 [0, 40), b0 [40, 60) (2 tokens),
    # a1 at 40 + 500 = 540, [540, 580).
    assert [(r.arrival_ns // 10**6, r.finish_ns // 10**6) for r in result.requests] == [(0, 40), (40, 60), (540, 580)]


def test_a_rejected_turn_ends_its_session(tmp_path):
    rows = [dict(ROWS[0], input_length=2000), ROWS[1], ROWS[2]]
    result = servesim.simulate(_config(write_trace(tmp_path / "t.jsonl", rows)))
    assert [r.status for r in result.requests] == ["rejected", "ok"]   # a's second turn is never sent
    assert result.summary["sessions"]["completed_sessions"] == 1


@pytest.mark.parametrize("row, says", [
    ({"session_id": "a", "timestamp": 0, "input_length": 5, "output_length": 2, "text_input": "hi"},
     "line 1: unknown field 'text_input' for format mooncake-sessions"),
    ({"session_id": "a", "delay": 3, "input_length": 5, "output_length": 2}, "line 1: the first turn of a session"),
    ({"session_id": 7, "input_length": 5, "output_length": 2}, "line 1: session_id must be a non-empty string"),
    ({"session_id": "a", "delay": -1, "input_length": 5, "output_length": 2}, "delay must be a non-negative"),
])
def test_bad_rows_are_refused_naming_the_line(tmp_path, row, says):
    trace = write_trace(tmp_path / "t.jsonl", [row])
    with pytest.raises(ServesimError, match=says):
        servesim.simulate(_config(trace))


def test_a_later_turn_timestamp_gives_its_delay_as_dynamo_reads_it(tmp_path):
    later = {k: v for k, v in ROWS[2].items() if k != "delay"}
    rows = [ROWS[0], ROWS[1], dict(later, timestamp=500, request_id="a-2")]
    result = servesim.simulate(_config(write_trace(tmp_path / "t.jsonl", rows)))
    # No delay: 500 − 0 (the session's timestamp before it) = 500 ms after turn 0's end at 40.
    assert _times(result)[2] == (2, 540.0, 550.0, 580.0, 32)
    assert result.requests[2].trace_request_id == "a-2"
    with pytest.raises(ServesimError, match="line 2: the timestamp of this turn of session 'a' is earlier"):
        servesim.simulate(_config(write_trace(tmp_path / "u.jsonl", [dict(ROWS[0], timestamp=900),
                                                                     dict(later, timestamp=100)])))
    with pytest.raises(ServesimError, match="line 2: a later turn of session 'a' has a timestamp but no delay"):
        servesim.simulate(_config(write_trace(tmp_path / "v.jsonl", [{k: v for k, v in ROWS[0].items()
                                                                      if k != "timestamp"},
                                                                     dict(later, timestamp=100)])))


def test_a_closed_loop_is_refused(tmp_path):
    with pytest.raises(ServesimError, match="closed_loop counts requests, not sessions"):
        servesim.simulate(_config(write_trace(tmp_path / "t.jsonl", ROWS),
                                  client={"mode": "closed_loop", "concurrency": 2}))


def test_the_sample_file_replays(tmp_path):
    """docs/examples/sessions_trace.jsonl, the page's sample in the format, on the default deployment."""
    from pathlib import Path

    sample = Path(__file__).resolve().parents[1] / "docs" / "examples" / "sessions_trace.jsonl"
    rows = [json.loads(line) for line in sample.read_text().splitlines() if line.strip()]
    result = servesim.simulate({"workload": {"trace": str(sample), "format": "mooncake-sessions"}})
    assert len(result.requests) == len(rows)
    assert result.summary["sessions"]["num_sessions"] == len({r.get("session_id") for r in rows})


# --------------------------------------------------------------------------- fast against reference

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.support.equivalence import assert_same  # noqa: E402
from tests.support.scenarios import as_backend, scenarios  # noqa: E402


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenarios(), st.sampled_from(["vllm", "sglang", "trtllm"]), st.data())
def test_fast_matches_reference_on_session_traces(tmp_path, scenario, backend, data):
    """The random traces of the fast-engine tests, their rows dealt into sessions."""
    rows, sched, client, trace_block_size = scenario
    seen: set[str] = set()
    for row in rows:
        session = data.draw(st.sampled_from(["a", "b", "c", None]))
        if session is None:
            continue
        row["session_id"] = session
        if session in seen:
            del row["timestamp"]
            row["delay"] = data.draw(st.sampled_from([0, 0.25, 7.5, 40]))
        seen.add(session)
    if client["mode"] == "closed_loop":
        client = {"mode": "bench", "max_concurrency": client["concurrency"]}
    trace = write_trace(tmp_path / "t.jsonl", rows)
    config = {"engine": {"backend": backend, "timing": {"kind": "fixed", "pass_ms": 10.0},
                         "workers": {"aggregated": {"scheduler": as_backend(sched, backend, data)}}},
              "workload": {"trace": str(trace), "format": "mooncake-sessions", "client": client,
                           "trace_block_size": trace_block_size}}
    assert_same(config)


def test_time_scale_scales_first_turns_and_delays(tmp_path):
    config = _config(write_trace(tmp_path / "t.jsonl", ROWS), client={"mode": "open_loop", "time_scale": 0.5})
    arrivals = [r.arrival_ns / 1e6 for r in servesim.simulate(config).requests]
    # b's first turn at 5 x 0.5 = 2.5 ms; a's second turn 500 x 0.5 = 250 ms after its first
    # reached the user at 40 (b, 2 tokens at 2.5, joins the pass at 10 as before).
    assert arrivals == [0.0, 2.5, 290.0]


def test_warmup_requests_are_refused_with_generated_sessions_only(tmp_path):
    sessions = {"num_sessions": 2, "turns": 2, "input_length": 8, "output_length": 2}
    with pytest.raises(ServesimError, match="warmup_requests leaves out the first N request ids"):
        servesim.simulate({"workload": {"sessions": sessions, "warmup_requests": 1}})
    config = _config(write_trace(tmp_path / "t.jsonl", ROWS))
    config["workload"]["warmup_requests"] = 1
    assert servesim.simulate(config).summary["completed"] == 2   # lines 2 and 3 measured
