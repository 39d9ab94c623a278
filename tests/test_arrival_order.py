"""Engine arrivals out of routing order: a longer prompt's path to the engine takes longer,
so a request routed later can reach the engine first, and a fast-forwarded run must end
at the earlier arrival, not at the first-routed one."""

from __future__ import annotations

import pytest

from tests.support.runs import REQUEST_PATH, fixed_config, write_trace

import servesim

# REQUEST_PATH: 1.5 ms in + 10 µs a prompt token. A (t=0, 16 tokens) reaches the engine at
# 1.66 ms and decodes in 10 ms passes from there: pass ends at 11.66, 21.66, ..., 111.66, 121.66.
# At 100 ms B (1,900 tokens) is routed first and arrives at 100 + 1.5 + 19 = 120.5 ms;
# C (116 tokens) is routed second and arrives at 100 + 1.5 + 1.16 = 102.66 ms.
# Sync scheduling: C is read at the pass end after it arrives, 111.66; B at 121.66.
ROWS = [{"timestamp": 0, "input_length": 16, "output_length": 200},
        {"timestamp": 100, "input_length": 1900, "output_length": 4},
        {"timestamp": 100, "input_length": 116, "output_length": 4}]


def _run(tmp_path, reference: bool):
    trace = write_trace(tmp_path / "t.jsonl", ROWS)
    cfg = fixed_config(trace, max_model_len=4096, async_scheduling=False)
    cfg["engine"]["request_path"] = REQUEST_PATH
    cfg["engine"]["reference"] = reference
    return {r.request_id: r for r in servesim.simulate(cfg).requests}


@pytest.mark.parametrize("reference", [False, True])
def test_the_request_that_reaches_the_engine_first_is_read_first(tmp_path, reference):
    by_id = _run(tmp_path, reference)
    assert [by_id[i].arrival_ns for i in (1, 2)] == [100_000_000, 100_000_000]
    assert by_id[2].first_scheduled_ns == 111_660_000   # C, at the pass end after 102.66 ms
    assert by_id[1].first_scheduled_ns == 121_660_000   # B, at the pass end after 120.5 ms


def test_fast_and_reference_engines_agree_on_out_of_order_arrivals(tmp_path):
    fast, ref = _run(tmp_path, False), _run(tmp_path, True)
    assert [(r.first_scheduled_ns, r.finish_ns) for r in fast.values()] == \
        [(r.first_scheduled_ns, r.finish_ns) for r in ref.values()]
