"""Weka agentic coding traces (workload.format weka-trace, workload/weka_trace.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import servesim
from servesim.errors import ServesimError
from servesim.workload.weka_trace import read_weka_trace

SAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "weka_trace.json"
NS = 10**9


def _config(path: Path, backend: str = "vllm", block: int = 64) -> dict:
    return {"engine": {"backend": backend, "timing": {"kind": "fixed", "pass_ms": 10.0}},
            "workload": {"trace": str(path), "format": "weka-trace", "trace_block_size": block}}


def test_the_sample_links_by_hand():
    rows = [(r.parents, r.arrival_ns, r.delay_ns, r.session_id.endswith("::sa:agent_001"), r.trace_id)
            for r in read_weka_trace(SAMPLE, None)]
    # requests[0]: t 0, api_time 4: a root at 0, its recorded end 4 s.
    # the subagent (spawned at 5, duration 9 s: ends at 14): its first request (t 5) waits on
    #   requests[0] plus 5 - 4 = 1 s; its second (t 9) on the first plus 9 - (5 + 2) = 2 s.
    # requests[2] (t 5.5): the subagent has not ended by then, so only requests[0]: 5.5 - 4.
    # requests[3] (t 15 >= 14): requests[2] and the subagent's last request, a fan-in, plus
    #   15 - max(5.5 + 1, 14) = 1 s.
    assert rows == [
        (None, 0, None, False, "requests[0]"),
        ((0,), None, 1 * NS, True, "requests[1].requests[0]"),
        ((1,), None, 2 * NS, True, "requests[1].requests[1]"),
        ((0,), None, NS * 3 // 2, False, "requests[2]"),
        ((3, 2), None, 1 * NS, False, "requests[3]"),
    ]


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_the_sample_replays_on_every_engine(backend):
    result = servesim.simulate(_config(SAMPLE, backend))
    by_id = {r.request_id: r for r in result.requests}
    assert result.summary["completed"] == 5 and result.summary["agentic_jobs"]["completed_jobs"] == 1
    # Each request arrives exactly when the last of what it waits on finished, plus its delay.
    for rid, parents, delay in ((1, (0,), NS), (2, (1,), 2 * NS), (3, (0,), NS * 3 // 2), (4, (3, 2), NS)):
        assert by_id[rid].arrival_ns == max(by_id[p].finish_ns for p in parents) + delay


def _edited(tmp_path, edit) -> Path:
    trace = json.loads(SAMPLE.read_text())
    edit(trace)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace))
    return path


@pytest.mark.parametrize("edit, says", [
    (lambda t: t["requests"][0].update(cost=1), r"requests\[0\]: unknown field 'cost'"),
    (lambda t: t["requests"][1]["requests"][1].update(priority=1), r"requests\[1\].requests\[1\]: unknown field"),
    (lambda t: t["requests"][2].update(ttft=0.1, type="n"), r"requests\[2\]: unknown field 'ttft'"),
    (lambda t: t.update(schema="v2"), "unknown field 'schema' for the trace"),
    (lambda t: t["requests"][1].update(nested=[]), r"requests\[1\]: unknown field 'nested' for a subagent"),
    (lambda t: t.update(hash_id_scope="global"), "hash_id_scope must be 'local'"),
    (lambda t: t.pop("block_size"), "the trace needs 'block_size'"),
    (lambda t: t["requests"][0].pop("in"), r"requests\[0\]: in must be an integer"),
    (lambda t: t["requests"][3].update(t=-1), r"requests\[3\]: t must be a non-negative number"),
    (lambda t: t["requests"][0].update(type="x"), r"requests\[0\]: type must be"),
])
def test_malformed_traces_name_the_request(tmp_path, edit, says):
    with pytest.raises(ServesimError, match=says):
        read_weka_trace(_edited(tmp_path, edit), None)


def test_a_zero_output_is_sent_as_one_and_the_block_size_must_match(tmp_path):
    path = _edited(tmp_path, lambda t: t["requests"][0].update(out=0))
    assert read_weka_trace(path, None)[0].output_length == 1
    with pytest.raises(ServesimError, match="set workload.trace_block_size to 64 \\(it is 16\\)"):
        servesim.simulate(_config(SAMPLE, block=16))


VALUES = [None, "x", -1, 0, 1.5, 1e300, True, [], {}, [1, "a"], float("nan")]


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_any_mangled_field_is_read_or_refused_in_one_sentence(data, tmp_path_factory):
    trace = json.loads(SAMPLE.read_text())
    holders = [trace, *trace["requests"], *trace["requests"][1]["requests"]]
    holder = data.draw(st.sampled_from(holders))
    key = data.draw(st.sampled_from(sorted(holder)))
    holder[key] = data.draw(st.sampled_from(VALUES))
    path = tmp_path_factory.mktemp("w") / "t.json"
    path.write_text(json.dumps(trace))
    try:
        read_weka_trace(path, None)
    except ServesimError as err:
        assert "\n" not in str(err)


def test_time_scale_scales_the_delays_after_a_predecessor():
    config = _config(SAMPLE)
    config["workload"]["client"] = {"mode": "open_loop", "time_scale": 0.5}
    by_id = {r.request_id: r for r in servesim.simulate(config).requests}
    # Half the recorded gaps: 0.5, 1, 0.75 and 0.5 s after what each waits on.
    for rid, parents, delay in ((1, (0,), NS // 2), (2, (1,), NS), (3, (0,), NS * 3 // 4), (4, (3, 2), NS // 2)):
        assert by_id[rid].arrival_ns == max(by_id[p].finish_ns for p in parents) + delay
