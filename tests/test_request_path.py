"""The request path (engine/request_path.py): the API server's time before and after the engine."""

from __future__ import annotations

import csv
import io

import pytest

import servesim
from servesim.engine.registry import BACKENDS
from servesim.engine.request_path import TOKENIZER_NS_PER_TOKEN, RequestPath, RequestPathCosts
from servesim.errors import ServesimError
from servesim.models import list_models
from tests.support.runs import REQUEST_PATH, fixed_config, write_trace



def _run(tmp_path, rows, client=None, request_path=REQUEST_PATH, **engine):
    config = fixed_config(write_trace(tmp_path / "t.jsonl", rows), client=client, max_num_seqs=4)
    config["engine"]["workers"]["aggregated"]["scheduler"]["async_scheduling"] = False
    if request_path is not None:
        config["engine"]["request_path"] = request_path
    config["engine"].update(engine)
    return servesim.simulate(config)


def _rows(result) -> list[dict]:
    out = io.StringIO()
    result.requests.write_csv(out)
    return list(csv.DictReader(io.StringIO(out.getvalue())))


def test_parts_by_hand(tmp_path):
    # tp 1, so no broadcast. Inbound: 1 + 0.5 ms + 100 tokens × 10 µs = 2.5 ms; fixed 10 ms passes.
    # The engine sees the request at 2.5, prefills [2.5, 12.5) and decodes at 22.5 and 32.5; the
    # client reads each token 0.25 ms later: first token 12.75, finish 32.75. TTFT 12.75 =
    # path 2.5 + 0.25, queue 0, prefill 10; TPOT (32.75 - 12.75) / 2 = 10, as without the path.
    row = _rows(_run(tmp_path, [{"timestamp": 0.0, "input_length": 100, "output_length": 3}]))[0]
    assert (row["first_token_ms"], row["finish_ms"], row["ttft_ms"], row["tpot_ms"]) == ("12.75", "32.75",
                                                                                       "12.75", "10")
    assert (row["request_path_ms"], row["queue_ms"], row["prefill_ms"], row["transfer_ms"]) == \
        ("2.75", "0", "10", "")
    assert row["first_scheduled_ms"] == "2.5"


def test_closed_loop_user_sends_after_reading_the_last_token(tmp_path):
    # One user: request 0 as above finishes at the client at 32.75, so request 1 is sent then;
    # 50 tokens: inbound 1.5 + 0.5 = 2 ms, engine at 34.75, first token out 44.75 + 0.25 = 45.
    rows = [{"timestamp": 0.0, "input_length": 100, "output_length": 3},
            {"timestamp": 0.0, "input_length": 50, "output_length": 2}]
    second = _rows(_run(tmp_path, rows, client={"mode": "closed_loop", "concurrency": 1}))[1]
    assert (second["arrival_ms"], second["first_scheduled_ms"], second["first_token_ms"]) == ("32.75", "34.75", "45")
    assert second["ttft_ms"] == "12.25"


def test_off_by_default_with_hand_set_step_times(tmp_path):
    # Fixed timing: no path unless enabled; engine.tokenization_ms stays a fixed frontend cost.
    rows = [{"timestamp": 0.0, "input_length": 100, "output_length": 3}]
    plain = _rows(_run(tmp_path, rows, request_path=None))[0]
    assert (plain["ttft_ms"], plain["request_path_ms"]) == ("10", "0")
    fixed = _rows(_run(tmp_path, rows, request_path=None, tokenization_ms=3.0))[0]
    assert (fixed["ttft_ms"], fixed["request_path_ms"], fixed["queue_ms"]) == ("13", "3", "0")
    # tokenization_ms in place of the per-token cost: 1 + 0.5 + 3 in, 0.25 out.
    alias = _rows(_run(tmp_path, rows, tokenization_ms=3.0))[0]
    assert (alias["ttft_ms"], alias["request_path_ms"]) == ("14.75", "4.75")


def test_broadcast_only_beyond_one_rank():
    costs = RequestPathCosts(http_ms=1.0, to_engine_ms=0.5, broadcast_ms=2.0, output_ms=0.25)
    hf_fast = TOKENIZER_NS_PER_TOKEN["hf-fast"]
    one = RequestPath.build(costs, tp=1, per_token_ns=hf_fast, tokenization_ms=None)
    eight = RequestPath.build(costs, tp=8, per_token_ns=hf_fast, tokenization_ms=None)
    assert one.inbound_ns(1000) == 1_500_000 + 1000 * 1500    # HF fast tokenizer: 1.5 µs a token
    assert eight.inbound_ns(1000) - one.inbound_ns(1000) == 2_000_000
    assert one.outbound_ns == eight.outbound_ns == 250_000
    assert RequestPath.build(None, tp=8, per_token_ns=hf_fast, tokenization_ms=None) == RequestPath()


def test_default_run_has_the_vllm_path():
    # The embedded default (vLLM, roofline timing, tp 1): in 0.5 + 0.3 ms + 1.5 µs a prompt
    # token, out 0.3 ms; request 0 has 374 prompt tokens: 0.8 + 0.561 + 0.3 = 1.661 ms.
    result = servesim.simulate(overrides=[("workload.max_requests", 1)])
    row = _rows(result)[0]
    assert row["request_path_ms"] == "1.661"
    parts = sum(float(row[k]) for k in ("request_path_ms", "queue_ms", "prefill_ms"))
    assert parts == pytest.approx(float(row["ttft_ms"]), abs=1e-9)


def test_every_engine_has_costs_and_every_model_a_known_tokenizer():
    for backend in BACKENDS.values():
        costs = backend.request_path
        assert costs is not None and 0 < costs.http_ms <= 2 and 0 < costs.output_ms <= 1, backend.name
    assert {model.tokenizer for model in list_models()} <= set(TOKENIZER_NS_PER_TOKEN)


def test_bad_values_are_one_sentence(tmp_path):
    rows = [{"timestamp": 0.0, "input_length": 10, "output_length": 2}]
    with pytest.raises(ServesimError, match="request_path"):
        _run(tmp_path, rows, request_path={"http_ms": -1.0})
    with pytest.raises(ServesimError, match="request_path"):
        _run(tmp_path, rows, request_path={"enabled": "yes"})
    with pytest.raises(ServesimError, match="engine.request_path.output_ms is 1e"):
        _run(tmp_path, rows, request_path={"output_ms": 1e12})
