"""Multi-turn sessions (workload.sessions): a hand-checked timeline, the properties every run
keeps, the fast engine against the reference, and the outputs (sessions.csv, summary, table)."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import servesim
from tests.support.equivalence import assert_same
from tests.support.scenarios import as_backend

BLOCK = 16


def _config(sessions: dict, sched: dict | None = None, client: dict | None = None, backend: str = "vllm",
            timing: dict | None = None) -> dict:
    scheduler = {"block_size": BLOCK, "num_gpu_blocks": 1000, "max_model_len": 4096, "max_num_seqs": 256,
                 "max_num_batched_tokens": 2048}
    if sched is not None:
        scheduler = sched
    workload = {"sessions": sessions, "trace_block_size": BLOCK}
    if client is not None:
        workload["client"] = client
    return {"engine": {"backend": backend, "timing": timing or {"kind": "fixed", "pass_ms": 10.0},
                       "workers": {"aggregated": {"scheduler": scheduler}}},
            "workload": workload}


TWO_BY_THREE = {"num_sessions": 2, "turns": 3, "first_input_length": 40, "input_length": 100, "output_length": 4,
                "think_time": {"distribution": "fixed", "seconds": 0.5}}


def _turns(result) -> dict[int, list]:
    """Each session's records in turn order."""
    by_session: dict[int, list] = {}
    for record in result.requests:   # in request-id order: a session's turns in turn order
        by_session.setdefault(result.sessions.session_of[record.request_id], []).append(record)
    return by_session


@pytest.mark.parametrize("reference", [False, True])
def test_two_sessions_of_three_turns_by_hand(reference):
    config = _config(TWO_BY_THREE)
    config["engine"]["reference"] = reference
    result = servesim.simulate(config)
    rows = [(r.request_id, r.arrival_ns // 10**6, r.first_token_ns // 10**6, r.finish_ns // 10**6, r.input_length,
             r.cached_tokens) for r in result.requests]
    # Turn 0 of both sessions (ids 0, 1) arrives at 0 with its 40 prompt tokens; pass [0, 10)
    # prefills both (80 tokens of a 2048 budget) and samples token 1; passes to 40 give tokens
    # 2-4. Turn 1 is sent 0.5 s after: at 540 ms, ids 2, 3 as the completions came. Its
    # prompt is 40 + 4 + 100 = 144 tokens. Turn 0 computed the KV of 43 tokens (not its last
    # output's), so 2 full blocks of 16 (32 tokens) are cached: 112 are prefilled in
    # [540, 550), the last token at 580. Turn 2 at 1080 ms: 144 + 4 + 100 = 248 tokens, turn
    # 1's 147 computed tokens fill 9 blocks (144 cached); first token 1090, last 1120.
    assert rows == [(0, 0, 10, 40, 40, 0), (1, 0, 10, 40, 40, 0),
                    (2, 540, 550, 580, 144, 32), (3, 540, 550, 580, 144, 32),
                    (4, 1080, 1090, 1120, 248, 144), (5, 1080, 1090, 1120, 248, 144)]
    block = result.summary["sessions"]
    assert block["num_sessions"] == block["completed_sessions"] == 2 and block["turns"] == 6
    assert block["mean_duration_ms"] == block["p99_duration_ms"] == 1120.0   # 0 to the last token at 1120
    assert block["mean_ttft_ms_by_turn"] == [10.0, 10.0, 10.0]
    assert block["prefix_cache_hit_rate_by_turn"] == [0.0, 32 / 144, 144 / 248]
    out = io.StringIO()
    result.sessions.write_csv(out)
    assert out.getvalue().splitlines() == [
        "session_id,planned_turns,turns,completed,start_ms,end_ms,duration_ms,meets_slo,input_tokens,output_tokens,"
        "cached_tokens,ttft_ms_by_turn,cached_tokens_by_turn",
        # 40 + 144 + 248 = 432 prompt tokens, 3 × 4 outputs, 32 + 144 cached.
        "0,3,3,true,0,1120,1120,,432,12,176,10;10;10,0;32;144",
        "1,3,3,true,0,1120,1120,,432,12,176,10;10;10,0;32;144",
    ]


def test_in_flight_starts_a_session_when_one_ends():
    sessions = dict(TWO_BY_THREE, in_flight=1)
    result = servesim.simulate(_config(sessions))
    times = [(r.request_id, r.arrival_ns // 10**6, r.finish_ns // 10**6) for r in result.requests]
    # Session 0 alone: turns at 0, 540, 1080 (each 40 ms, as above), its last token at 1120;
    # session 1 starts then: 1120, 1120 + 540 = 1660, 2200, ending at 2240.
    assert times == [(0, 0, 40), (1, 540, 580), (2, 1080, 1120), (3, 1120, 1160), (4, 1660, 1700),
                     (5, 2200, 2240)]


def test_a_bench_semaphore_counts_requests_of_every_turn():
    client = {"mode": "bench", "max_concurrency": 1}
    result = servesim.simulate(_config(TWO_BY_THREE, client=client))
    times = [(r.request_id, r.arrival_ns // 10**6, r.finish_ns // 10**6) for r in result.requests]
    # One request at a time (rate inf: every session due at 0): session 0's turn 0 runs
    # [0, 40), session 1's waits for the slot and runs [40, 80). Session 0's turn 1 is due at
    # 40 + 500 = 540 and runs to 580; session 1's is due at 80 + 500 = 580, the instant the
    # slot frees (pass ends come first), and runs to 620. Turn 2s: 1080 to 1120, 1120 to 1160.
    assert times == [(0, 0, 40), (1, 40, 80), (2, 540, 580), (3, 580, 620), (4, 1080, 1120), (5, 1120, 1160)]


def test_a_rejected_turn_ends_its_session():
    sched = {"block_size": BLOCK, "num_gpu_blocks": 1000, "max_model_len": 200, "max_num_seqs": 8,
             "max_num_batched_tokens": 512}
    result = servesim.simulate(_config(TWO_BY_THREE, sched=sched))
    # Turn 1 (144 tokens) fits 200; turn 2 (248) is refused, and there is no turn 3.
    assert [r.status for r in result.requests] == ["ok", "ok", "ok", "ok", "rejected", "rejected"]
    block = result.summary["sessions"]
    assert block["completed_sessions"] == 0 and block["mean_duration_ms"] is None


BACKEND_SCHEDULERS = {
    "vllm": {"block_size": BLOCK, "max_model_len": 4096, "num_gpu_blocks": 1000, "max_num_batched_tokens": 2048},
    "sglang": {"page_size": BLOCK, "context_length": 4096, "max_total_tokens": 16000},
    "trtllm": {"tokens_per_block": BLOCK, "max_seq_len": 4096, "max_tokens": 16000},
}


@pytest.mark.parametrize("backend", sorted(BACKEND_SCHEDULERS))
def test_every_backend_carries_the_context(backend):
    result = servesim.simulate(_config(TWO_BY_THREE, sched=BACKEND_SCHEDULERS[backend], backend=backend))
    # Later turns hit at least the blocks the turn before computed (32, 144 tokens as above).
    cached = [r.cached_tokens for r in result.requests]
    assert cached[:2] == [0, 0] and min(cached[2:4]) >= 32 and min(cached[4:]) >= 144, cached


# --------------------------------------------------------------------------- properties


def _length(draw, low: int, high: int):
    if draw(st.booleans()):
        return draw(st.integers(low, high))
    a, b = sorted((draw(st.integers(low, high)), draw(st.integers(low, high))))
    return {"min": a, "max": b}


@st.composite
def session_workloads(draw):
    think = draw(st.sampled_from([
        {"distribution": "fixed", "seconds": 0.0}, {"distribution": "fixed", "seconds": 0.013},
        {"distribution": "exponential", "mean_s": 0.05}, {"distribution": "lognormal", "median_s": 0.02,
                                                          "sigma": 0.8}]))
    sessions = {"num_sessions": draw(st.integers(1, 5)), "turns": _length(draw, 1, 4),
                "input_length": _length(draw, 1, 40), "output_length": _length(draw, 1, 30),
                "think_time": think, "seed": draw(st.integers(0, 3))}
    if draw(st.booleans()):
        sessions["first_input_length"] = _length(draw, 1, 60)
    if draw(st.booleans()):
        sessions["system_prompt_length"] = draw(st.sampled_from([4, 12, 16]))   # shared by every session
    client = draw(st.sampled_from([None, {"mode": "poisson", "rate": 20.0}, {"mode": "bench", "max_concurrency": 2},
                                   {"mode": "bench", "request_rate": 30.0, "burstiness": 0.5}, "in_flight"]))
    if client == "in_flight":
        sessions["in_flight"] = draw(st.integers(1, 3))
        client = None
    return sessions, client


PROPERTIES = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTIES
@given(session_workloads(), st.sampled_from([4, 16]))
def test_turns_wait_carry_their_context_and_conserve_tokens(workload, block):
    sessions, client = workload
    config = _config(sessions, client=client)
    config["workload"]["trace_block_size"] = block
    config["engine"]["workers"]["aggregated"]["scheduler"].update(block_size=block, num_gpu_blocks=4096 // block + 1)
    result = servesim.simulate(config)
    fixed = sessions["think_time"]["distribution"] == "fixed"
    new_input = sessions["input_length"]
    low, high = (new_input, new_input) if isinstance(new_input, int) else (new_input["min"], new_input["max"])
    for turns in _turns(result).values():
        for before, after in zip(turns, turns[1:]):
            assert after.arrival_ns >= before.finish_ns   # plus the think time: exactly, when fixed
            if fixed and client is None:
                assert after.arrival_ns == before.finish_ns + round(sessions["think_time"]["seconds"] * 1e9)
            carried = before.input_length + before.output_length
            assert low <= after.input_length - carried <= high          # context + new input, nothing lost
            # The big cache holds every block the turn before computed (all but its last output).
            assert after.cached_tokens >= (carried - 1) // block * block
        assert all(r.output_length == r.requested_output_length for r in turns)
    again = servesim.simulate(config)
    assert again.requests == result.requests and again.summary["sessions"] == result.summary["sessions"]


@settings(max_examples=40, deadline=None)
@given(session_workloads(), st.sampled_from(["vllm", "sglang", "trtllm"]), st.data())
def test_fast_matches_reference_on_sessions(workload, backend, data):
    """Small caches (preemption, eviction of carried context), chunked prefill, async scheduling."""
    sessions, client = workload
    block = data.draw(st.sampled_from([4, 8, 16]))
    max_model_len = data.draw(st.sampled_from([128, 256]))
    sched = {"block_size": block, "max_model_len": max_model_len,
             "num_gpu_blocks": max_model_len // block + 1 + data.draw(st.integers(0, 40)),
             "max_num_seqs": data.draw(st.integers(1, 8)), "max_num_batched_tokens": max_model_len,
             "enable_chunked_prefill": data.draw(st.booleans()), "enable_prefix_caching": True,
             "long_prefill_token_threshold": data.draw(st.sampled_from([0, 8])),
             "async_scheduling": data.draw(st.booleans())}
    config = _config(sessions, sched=as_backend(sched, backend, data), client=client, backend=backend)
    config["workload"]["trace_block_size"] = data.draw(st.sampled_from([block, 12]))
    assert_same(config)


# --------------------------------------------------------------------------- outputs


def test_cli_writes_sessions_csv_and_the_turn_plot(tmp_path):
    from tests.support.cli import servesim_cli

    config = tmp_path / "c.json"
    config.write_text(json.dumps(_config(TWO_BY_THREE)))
    out = tmp_path / "out"
    result = servesim_cli("run", str(config), "--out", str(out), "--plots")
    assert result.returncode == 0, result.stderr
    assert (out / "sessions.csv").read_text().splitlines()[1] == "0,3,3,true,0,1120,1120,,432,12,176,10;10;10,0;32;144"
    assert (out / "ttft_by_turn.png").stat().st_size > 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trace_format"] == "sessions" and summary["sessions"]["completed_sessions"] == 2
    # The printed table's session lines: 2 of 2 complete, 1.12 s each, turn 3's hits 144 / 248.
    assert "Sessions (complete / all):               2 / 2" in result.stdout
    assert "Mean session duration (s):               1.12" in result.stdout
    assert "Prefix cache hit rate, turn 3 (%):       58.06" in result.stdout


def test_configs_without_sessions_dump_as_before():
    from servesim.config import load_config

    dumped = load_config(None).config.model_dump(mode="json")["workload"]
    assert "sessions" not in dumped
    with_sessions = load_config(_config(TWO_BY_THREE)).config.model_dump(mode="json")["workload"]
    assert with_sessions["sessions"]["turns"] == 3


def test_a_trace_argument_replaces_the_sessions(tmp_path):
    from tests.support.runs import write_trace

    trace = write_trace(tmp_path / "t.jsonl", [{"timestamp": 0, "input_length": 20, "output_length": 3}])
    result = servesim.simulate(_config(TWO_BY_THREE), trace=trace)
    assert len(result.requests) == 1 and result.sessions is None and "sessions" not in result.summary


def test_a_halving_sweep_of_sessions_is_refused_in_one_sentence():
    from servesim.errors import ServesimError
    from servesim.sweep.trials import workload_size

    with pytest.raises(ServesimError, match="sweep sessions without halving"):
        workload_size(_config(TWO_BY_THREE))


def test_a_shared_system_prompt_and_a_session_slo_by_hand():
    sessions = dict(TWO_BY_THREE, system_prompt_length=32, first_input_length=8, slo_ms=1100.0)
    result = servesim.simulate(_config(sessions))
    # Both first prompts are the 32-token system prompt plus 8 tokens: 40, as before. They are
    # admitted in the same scheduler call; the first one's blocks get their keys as they are
    # allocated (as vLLM caches them), so the second hits the system prompt's 2 blocks (32).
    # Turn 1 is 144 tokens again and hits its session's 2 blocks (32), turn 2 its 9 (144).
    # Pass times are fixed, so the timeline is the hand-checked one: each session 1,120 ms,
    # over the 1,100 ms SLO.
    assert [(r.input_length, r.cached_tokens, r.finish_ns // 10**6) for r in result.requests] == [
        (40, 0, 40), (40, 32, 40), (144, 32, 580), (144, 32, 580), (248, 144, 1120), (248, 144, 1120)]
    block = result.summary["sessions"]
    assert (block["slo_ms"], block["sessions_meeting_slo"], block["session_slo_attainment"]) == (1100.0, 0, 0.0)
    out = io.StringIO()
    result.sessions.write_csv(out)
    assert out.getvalue().splitlines()[1].split(",")[7] == "false"
    # At 1,120 ms exactly, both meet it (the bound is inclusive).
    exact = servesim.simulate(_config(dict(sessions, slo_ms=1120.0)))
    assert exact.summary["sessions"]["sessions_meeting_slo"] == 2


def test_a_time_scale_on_generated_open_loop_sessions_is_refused():
    """Generated sessions under open_loop all open at 0; a scale on those times changes nothing."""
    from servesim.errors import ServesimError

    with pytest.raises(ServesimError, match=r"time_scale \(0.5\) scales a trace's arrival times"):
        servesim.simulate(_config(TWO_BY_THREE, client={"mode": "open_loop", "time_scale": 0.5}))
    # The default scale stays accepted: the two sessions open at 0 (turn 0 ends at 40 ms, as above).
    result = servesim.simulate(_config(TWO_BY_THREE, client={"mode": "open_loop", "time_scale": 1.0}))
    assert [r.arrival_ns for r in list(result.requests)[:2]] == [0, 0]
