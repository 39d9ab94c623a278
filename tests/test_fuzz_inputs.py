"""Fuzzing the boundary: every input either runs or is refused in one sentence, quickly.

Hypothesis mutates a small valid run three ways (config fields, trace lines, a model's
config.json) with values drawn to be odd: zero, negative, huge, non-finite, of the wrong
type, nested. Through the Python API each must return a Result or raise ServesimError
with a one-line message, within TIME_LIMIT_S; a few CLI runs check the same end to end
(exit 0 or 2, one `error:` line, no traceback).
"""

from __future__ import annotations

import json
import os
import signal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import servesim
from servesim.yaml_io import dump_yaml
from servesim.errors import ServesimError

from tests.support.bad_input_corpus import MODEL, TRACE, base_config
from tests.support.cli import servesim_cli

TIME_LIMIT_S = 10
# SERVESIM_FUZZ_EXAMPLES=500 (with SERVESIM_HYPOTHESIS=explore) hunts further.
FUZZ = settings(max_examples=int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "40")), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


class _Timeout(BaseException):
    pass


def bounded_simulate(**kwargs) -> str:
    """'ok' or 'error'; fails the test on any other exception or after TIME_LIMIT_S seconds."""
    def on_alarm(signum, frame):
        raise _Timeout

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT_S)
    try:
        servesim.simulate(**kwargs)
        return "ok"
    except ServesimError as err:
        message = str(err)
        assert message and "\n" not in message, repr(message)
        return "error"
    except _Timeout:
        pytest.fail(f"no answer within {TIME_LIMIT_S} s for {kwargs}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# Values a user might mistype or a tool might emit: odd numbers, wrong types, nesting.
ODD_INTS = st.sampled_from([0, -1, 1, 2, 7, 2**31, 2**63, 10**12, 10**30, -10**30])
ODD_FLOATS = st.sampled_from([0.0, -0.0, 1e-300, 0.5, 1.5, 1e15, 1e300, float("inf"), float("-inf"), float("nan")])
SCALARS = st.one_of(ODD_INTS, ODD_FLOATS, st.booleans(), st.none(), st.text(max_size=5))
ODD = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                    st.dictionaries(st.text(max_size=3), inner, max_size=2)),
                   max_leaves=6)

CONFIG_PATHS = [
    "seed", "model", "gpu", "precision", "kv_cache_dtype",
    "engine.backend", "engine.tokenization_ms", "engine.timing.kind", "engine.timing.pass_ms",
    "engine.request_path", "engine.request_path.enabled", "engine.request_path.http_ms",
    "engine.request_path.tokenizer_us_per_token", "engine.kv_transfer.handoff_admission",
    "engine.workers.aggregated.scheduler.max_cudagraph_capture_size",
    "engine.workers.aggregated.count", "engine.workers.aggregated.tp",
    "engine.workers.aggregated.scheduler.max_num_seqs", "engine.workers.aggregated.scheduler.block_size",
    "engine.workers.aggregated.scheduler.num_gpu_blocks", "engine.workers.aggregated.scheduler.max_model_len",
    "engine.workers.aggregated.scheduler.max_num_batched_tokens",
    "workload.format", "workload.max_requests", "workload.warmup_requests", "workload.trace_block_size",
    "workload.client", "workload.client.mode", "workload.client.time_scale", "workload.client.rate",
    "workload.client.concurrency", "router.policy", "slo.ttft_ms",
    "workload.sessions", "workload.sessions.turns", "workload.sessions.think_time",
    "workload.sessions.in_flight",
]


def _set(config: dict, dotted: str, value) -> None:
    node = config
    *parents, last = dotted.split(".")
    for key in parents:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    node[last] = value


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(CONFIG_PATHS), ODD), min_size=1, max_size=3))
def test_config_mappings_run_or_refuse_in_one_sentence(tmp_path, edits):
    (tmp_path / "trace.jsonl").write_text(TRACE)
    config = base_config(trace=str(tmp_path / "trace.jsonl"))
    for path, value in edits:
        _set(config, path, value)
    bounded_simulate(config=config)


SESSION_PATHS = ["workload.sessions.num_sessions", "workload.sessions.turns", "workload.sessions.input_length",
                 "workload.sessions.output_length", "workload.sessions.first_input_length",
                 "workload.sessions.think_time", "workload.sessions.think_time.distribution",
                 "workload.sessions.think_time.sigma", "workload.sessions.in_flight", "workload.client",
                 "workload.sessions.system_prompt_length", "workload.sessions.slo_ms"]


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(SESSION_PATHS), ODD), min_size=1, max_size=3))
def test_session_mappings_run_or_refuse_in_one_sentence(tmp_path, edits):
    config = base_config(workload__trace=None, workload__format=None, workload__sessions={
        "num_sessions": 2, "turns": 2, "input_length": 5, "output_length": 2,
        "think_time": {"distribution": "lognormal", "median_s": 0.01, "sigma": 0.5}})
    for path, value in edits:
        _set(config, path, value)
    bounded_simulate(config=config)


ROW_VALUES = st.one_of(ODD_INTS, ODD_FLOATS, st.booleans(), st.none(), st.text(max_size=4),
                       st.lists(ODD_INTS, max_size=3))


@st.composite
def trace_lines(draw) -> str:
    """A JSONL line: a row with odd field values, or odd text."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.text(max_size=20)).replace("\n", " ")
    row = {"timestamp": 0, "input_length": 5, "output_length": 2}
    for key in draw(st.lists(st.sampled_from(["timestamp", "input_length", "output_length", "hash_ids", "x"]),
                             max_size=2)):
        row[key] = draw(ROW_VALUES)
    # allow_nan: JSON's NaN/Infinity spellings, which Python's json reads back.
    return json.dumps(row)


@FUZZ
@given(st.lists(trace_lines(), min_size=1, max_size=4), st.sampled_from(["mooncake", None]))
def test_trace_lines_run_or_refuse_in_one_sentence(tmp_path, lines, fmt):
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = base_config(trace=str(trace))
    config["workload"]["format"] = fmt
    if fmt is None:
        del config["workload"]["format"]
    bounded_simulate(config=config)


CELLS = st.one_of(st.sampled_from(["0", "1", "-1", "5", "1e300", "inf", "nan", "", " ", "1.5", "10" * 20,
                                   "2023-11-16 18:17:03.97", "0001-01-01 00:00:00", "9999-12-31 23:59:59"]),
                  st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=6))


@FUZZ
@given(st.sampled_from(["vidur", "azure"]), st.lists(st.lists(CELLS, min_size=2, max_size=4), min_size=1, max_size=3))
def test_csv_trace_cells_run_or_refuse_in_one_sentence(tmp_path, fmt, rows):
    header = ("num_prefill_tokens,num_decode_tokens,arrived_at" if fmt == "vidur"
              else "TIMESTAMP,ContextTokens,GeneratedTokens")
    body = "".join(",".join(cells) + "\n" for cells in rows)
    trace = tmp_path / "t.csv"
    trace.write_text(header + "\n" + body, encoding="utf-8")
    config = base_config(trace=str(trace))
    config["workload"]["format"] = fmt
    bounded_simulate(config=config)


MODEL_KEYS = ["hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size",
              "intermediate_size", "max_position_embeddings", "head_dim", "num_experts", "num_experts_per_tok",
              "moe_intermediate_size", "decoder_sparse_step", "first_k_dense_replace", "mlp_only_layers",
              "layer_types", "sliding_window", "full_attention_interval", "kv_lora_rank", "quantization_config",
              "tie_word_embeddings", "text_config", "torch_dtype"]


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(MODEL_KEYS), ODD), min_size=1, max_size=3))
def test_model_config_json_runs_or_refuses_in_one_sentence(tmp_path, edits):
    model = dict(MODEL)
    for key, value in edits:
        model[key] = value
    path = tmp_path / "m.json"
    path.write_text(json.dumps(model))
    (tmp_path / "trace.jsonl").write_text(TRACE)
    config = base_config(trace=str(tmp_path / "trace.jsonl"), model=str(path))
    # Roofline timing reads every size of the model, so odd sizes reach the step-time model too.
    config["engine"]["timing"] = {"kind": "roofline"}
    bounded_simulate(config=config)


@pytest.mark.parametrize("edits, words", [
    ({"engine.timing.pass_ms": 1e300}, "servesim's limit is 3,600,000 ms (one hour) per pass"),
    ({"workload.client": {"mode": "poisson", "rate": float("inf")}}, "input should be a finite number, got inf"),
    ({"model": "m.json"}, "num_hidden_layers must be between 1 and 10,000, got 1,000,000,000"),
], ids=["huge-pass", "inf-rate", "odd-model"])
def test_cli_refuses_in_one_sentence(tmp_path, edits, words):
    (tmp_path / "trace.jsonl").write_text(TRACE)
    (tmp_path / "m.json").write_text(json.dumps({**MODEL, "num_hidden_layers": 10**9, "num_experts": 8,
                                                 "num_experts_per_tok": 2}))
    config = base_config()
    for path, value in edits.items():
        _set(config, path, value)
    # YAML, not JSON: json.dumps writes inf as Infinity, which YAML reads as a string.
    (tmp_path / "c.yaml").write_text(dump_yaml(config))
    proc = servesim_cli("run", "c.yaml", "-q", cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: "), proc.stderr
    assert words in proc.stderr, proc.stderr


# --------------------------------------------------------------------------- servesim validate's result files

RESULT_KEYS = ["num_prompts", "completed", "failed", "duration", "request_rate", "burstiness", "max_concurrency",
               "ramp_up_strategy", "input_lens", "output_lens", "ttfts", "itls", "start_times", "errors",
               "latencies", "mean_ttft_ms", "p99_tpot_ms", "total_input_tokens", "total_output_tokens", "model_id",
               "backend", "request_throughput"]


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(RESULT_KEYS), ODD), min_size=1, max_size=3),
       st.sampled_from(["vllm_detailed.json", "vllm_summary.json"]))
def test_result_files_validate_or_refuse_in_one_sentence(tmp_path, edits, name):
    from pathlib import Path

    from servesim.validate.compare import compare_run
    from servesim.validate.readers import read_results

    data = json.loads((Path(__file__).parent / "data" / "results" / name).read_text())
    for key, value in edits:
        data[key] = value
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    config = tmp_path / "c.yaml"
    config.write_text(dump_yaml(base_config()))

    def on_alarm(signum, frame):
        raise _Timeout

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT_S)
    try:
        for run in read_results(path):
            compare_run(run, config)
    except ServesimError as err:
        assert str(err) and "\n" not in str(err), repr(str(err))
    except _Timeout:
        pytest.fail(f"no answer within {TIME_LIMIT_S} s for {edits}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
