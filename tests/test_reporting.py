"""What a run says about itself (docs/outputs.md): warnings, `simulated`, percentiles and
vllm bench's peaks, the vLLM result.json, requests.csv's trace ids and errors.

Fixed 10 ms passes and sync scheduling unless a test says otherwise, so every time is a
multiple of 10 ms after the request's arrival or the pass it waits for.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os

import pytest

import servesim
from servesim.errors import ServesimError

from tests.support.cli import servesim_cli
from tests.support.runs import fixed_config, run_backend, write_trace

SYNC = {"async_scheduling": False}


def _simulate(tmp_path, rows, client=None, **scheduler):
    """The fast engine (no pass log), fixed 10 ms passes."""
    trace = write_trace(tmp_path / "trace.jsonl", rows)
    return servesim.simulate(fixed_config(trace, client=client, **{**SYNC, **scheduler}))


# --------------------------------------------------------------------------- percentiles


def test_percentile_keys_and_values_by_hand(run):
    # Request 0 arrives at 0, prefills in [0, 10), decodes at 20 and 30: TTFT 10, E2E 30.
    # Request 1 arrives at 2.5, prefills in [10, 20), decodes at 30: TTFT 17.5, E2E 27.5.
    # numpy's linear percentile of [10, 17.5] at q: 10 + 7.5 q/100: p50 13.75, p90 16.75,
    # p99.9 17.4925; population std 3.75. ITLs: 10, 10 (request 0), 10 (request 1).
    r = run([{"timestamp": 0.0, "input_length": 100, "output_length": 3},
             {"timestamp": 2.5, "input_length": 50, "output_length": 2}], async_scheduling=False)
    s = servesim.simulate(r.result.config, percentiles=[99.9, 50, 90]).summary
    assert s["percentiles"] == [50.0, 90.0, 99.9]
    assert s["p50_ttft_ms"] == s["median_ttft_ms"] == 13.75
    assert s["p90_ttft_ms"] == pytest.approx(16.75)
    assert s["p99.9_ttft_ms"] == pytest.approx(17.4925)
    assert (s["min_ttft_ms"], s["max_ttft_ms"], s["std_ttft_ms"]) == (10.0, 17.5, 3.75)
    assert (s["min_e2e_ms"], s["max_e2e_ms"]) == (27.5, 30.0)
    assert (s["min_itl_ms"], s["max_itl_ms"], s["std_itl_ms"], s["mean_itl_ms"]) == (10.0, 10.0, 0.0, 10.0)
    assert "p99_ttft_ms" not in s and "p95_ttft_ms" not in s
    default = r.result.summary   # 50, 90, 95, 99
    assert {"p50_tpot_ms", "p90_tpot_ms", "p95_tpot_ms", "p99_tpot_ms", "median_tpot_ms"} <= set(default)
    assert default["percentiles"] == [50.0, 90.0, 95.0, 99.0]


def test_histogram_std_min_max_exact():
    from servesim.metrics.histogram import LogHistogram

    # Values 1, 2, 3, 6 (weights 1, 1, 1, 2 through add_many): mean 18/5 = 3.6,
    # Σv² = 1 + 4 + 9 + 72 = 86, variance 86/5 - 3.6² = 4.24.
    h = LogHistogram()
    h.add(1)
    h.add(3)
    h.add(5, 0)          # a count of 0 records nothing
    h.add_many([6], 2)
    h.add_many([2])
    h.add_many([], 4)    # nothing either
    assert (h.min, h.max, h.count) == (1, 6, 5)
    assert h.std == pytest.approx(math.sqrt(4.24))


@pytest.mark.parametrize("text", ["", "abc", "0", "101", "50,,90", "nan", "inf"])
def test_bad_metric_percentiles(text):
    from servesim.metrics.summary import parse_percentiles

    with pytest.raises(ServesimError, match="--metric-percentiles"):
        parse_percentiles(text)


def test_metric_percentiles_parse_like_vllm():
    from servesim.metrics.summary import parse_percentiles, percentile_word

    assert parse_percentiles("99.9, 50,90,50") == (50.0, 90.0, 99.9)
    assert [percentile_word(q) for q in (50.0, 99.0, 99.9, 100.0)] == ["50", "99", "99.9", "100"]


@pytest.mark.parametrize("bad", ["50", [0], [101], [True], ["50"], []])
def test_simulate_refuses_bad_percentiles(bad):
    with pytest.raises(ServesimError, match="percentiles"):
        servesim.simulate(percentiles=bad)


# --------------------------------------------------------------------------- vllm bench's peaks

PEAK_ROWS = [{"timestamp": 0.0, "input_length": 10, "output_length": 150},
             {"timestamp": 1205.0, "input_length": 10, "output_length": 50}]


def test_peak_output_rate_and_concurrency_by_hand(tmp_path, run):
    # Request 0: first token at 10 ms, then one every 10 ms: tokens at 10, 20, ..., 1500.
    # Request 1 arrives at 1205, is prefilled in [1210, 1220): tokens at 1220, ..., 1710.
    # Seconds from the first arrival: second 0 holds 99 of request 0's tokens (10..990);
    # second 1 holds its other 51 (1000..1500) and request 1's 50: 101, the peak.
    # Request 0 is in flight in seconds 0 and 1, request 1 in second 1 only: peak 2.
    fast = _simulate(tmp_path, PEAK_ROWS).summary
    reference = run(PEAK_ROWS, async_scheduling=False).result.summary
    for s in (fast, reference):
        assert (s["max_output_tokens_per_s"], s["max_concurrent_requests"]) == (101.0, 2)
        assert s["total_output_tokens"] == 200


def test_peak_helper_counts_like_vllm():
    import numpy as np

    from servesim.metrics.summary import peak_output_and_concurrency

    s = 1_000_000_000
    # Starts 0.5 s and 2.2 s, ends 1.0 s and 2.3 s; seconds count from the first start (0.5 s),
    # so request 0 spans 0.0-0.5 s (bucket 0) and request 1 1.7-1.8 s (bucket 1): peak 1.
    start = np.array([s // 2, 22 * s // 10])
    end = np.array([s, 23 * s // 10])
    tokens = np.array([s // 2, 9 * s // 10, s, 22 * s // 10])
    counts = np.array([3, 1, 2, 5])
    # Origin 0.5 s: tokens at 0.0, 0.4, 0.5, 1.7 s from it: buckets 0, 0, 0, 1 → 6 and 5.
    assert peak_output_and_concurrency(start, end, tokens, counts) == (6.0, 1)
    assert peak_output_and_concurrency(start[:0], end[:0], tokens[:0], counts[:0]) == (0.0, 0)
    # A request ending exactly on a second boundary counts in that second too (vLLM's
    # range(start, end + 1)): request 0 spans 0-1 s, request 1 starts at 1 s, so both are in second 1;
    # ending 1 ns earlier, they never overlap.
    one = (np.array([s]), np.array([1]))
    assert peak_output_and_concurrency(np.array([0, s]), np.array([s, 2 * s]), *one) == (1.0, 2)
    assert peak_output_and_concurrency(np.array([0, s]), np.array([s - 1, 2 * s]), *one)[1] == 1


# --------------------------------------------------------------------------- warnings


def _overload_rows(waiting: int) -> list[dict]:
    # 17 one-token requests 100 ms apart (each done 10 ms after it arrives), then at 1800 ms a
    # 5-token request (running until 1850: max_num_seqs 1 holds the others back), `waiting`
    # requests at 1801 ms, and the last at 1802. At the last arrival `waiting` requests that
    # arrived before it wait.
    rows = [{"timestamp": 100.0 * i, "input_length": 10, "output_length": 1} for i in range(17)]
    rows.append({"timestamp": 1800.0, "input_length": 10, "output_length": 5})
    rows += [{"timestamp": 1801.0, "input_length": 10, "output_length": 1} for _ in range(waiting)]
    rows.append({"timestamp": 1802.0, "input_length": 10, "output_length": 1})
    return rows


def test_overload_warning_boundary(tmp_path):
    from servesim.metrics.run_warnings import backlog_at_last_arrival

    # 1 waiting of 20 served is 5%: not more than 5%, no warning.
    quiet = _simulate(tmp_path, _overload_rows(1), max_num_seqs=1)
    assert backlog_at_last_arrival(quiet.requests)[:2] == (1, 20)
    assert quiet.warnings == [] and quiet.summary["warnings"] == []
    # 2 waiting of 21 is 9.5%: a warning, with the numbers.
    loud = _simulate(tmp_path, _overload_rows(2), max_num_seqs=1)
    assert backlog_at_last_arrival(loud.requests)[:2] == (2, 21)
    assert len(loud.warnings) == 1 and loud.summary["warnings"] == loud.warnings
    assert loud.warnings[0].startswith("the offered load exceeds what the deployment serves: when the last "
                                       "request arrived (at 1.8 s), 2 of the 21 requests served (9.5%")


def test_closed_loop_and_bursts_never_warn_of_overload(tmp_path):
    rows = [{"timestamp": float(i), "input_length": 10, "output_length": 5} for i in range(40)]
    closed = _simulate(tmp_path, rows, client={"mode": "closed_loop", "concurrency": 40}, max_num_seqs=1)
    assert not any("offered load" in w for w in closed.warnings)
    burst = _simulate(tmp_path, [{**r, "timestamp": 0.0} for r in rows], max_num_seqs=1)
    assert burst.warnings == []
    overloaded = _simulate(tmp_path, rows, max_num_seqs=1)   # 1 ms apart, 50 ms each
    assert any("offered load" in w for w in overloaded.warnings)


def test_embedded_default_gives_no_warning():
    result = servesim.simulate()
    assert result.warnings == [] and result.summary["warnings"] == []
    assert result.summary["rejected_by_reason"] == {}


def test_rejections_counted_per_reason_vllm(tmp_path, run):
    # max_model_len 128: a 128-token prompt leaves no room for output, a 127-token one does.
    rows = [{"timestamp": 0.0, "input_length": 128, "output_length": 4},
            {"timestamp": 1.0, "input_length": 127, "output_length": 4},
            {"timestamp": 2.0, "input_length": 500, "output_length": 4}]
    r = run(rows, max_model_len=128)
    s = r.result.summary
    assert s["rejected_by_reason"] == {"prompt_exceeds_max_model_len": 2}
    assert r.result.warnings == [
        "2 of 3 requests (66.7%) were rejected: 2 with a prompt that leaves no room for output within "
        "max_model_len (128); their reasons are in requests.csv's error column"]
    assert [rec.error for rec in r.result.requests] == [
        "prompt of 128 tokens leaves no room for output within max_model_len 128", "",
        "prompt of 500 tokens leaves no room for output within max_model_len 128"]


def test_rejections_trtllm_token_budget(tmp_path):
    # No chunked context, max_num_tokens 32: a 33-token prompt is over the budget, a 32 one is
    # not; max_seq_len 64: a 64-token prompt has no room for output.
    rows = [{"timestamp": 0.0, "input_length": 33, "output_length": 2},
            {"timestamp": 1.0, "input_length": 32, "output_length": 2},
            {"timestamp": 2.0, "input_length": 64, "output_length": 2}]
    r = run_backend(tmp_path, rows, "trtllm", {"disable_overlap_scheduler": True, "tokens_per_block": 4,
                                               "max_seq_len": 64, "max_tokens": 400, "max_num_tokens": 32})
    assert r.result.summary["rejected_by_reason"] == {"prompt_exceeds_max_model_len": 1,
                                                      "prompt_exceeds_token_budget": 1}
    assert "1 with a prompt longer than the token budget max_num_tokens (32) while enable_chunked_context " \
           "is off" in r.result.warnings[0]
    assert "1 with a prompt that leaves no room for output within max_seq_len (64)" in r.result.warnings[0]
    errors = [rec.error for rec in r.result.requests]
    assert errors == ["prompt of 33 tokens exceeds max_num_tokens 32 without chunked context", "",
                      "prompt of 64 tokens leaves no room for output within max_seq_len 64"]


def _roofline(tmp_path, gpu: str, backend: str = "vllm", profile: str | None = None):
    trace = write_trace(tmp_path / "t.jsonl", [{"timestamp": 0.0, "input_length": 64, "output_length": 2}])
    timing = {"kind": "roofline", **({"profile": profile} if profile else {})}
    return servesim.simulate({"gpu": gpu, "engine": {"backend": backend, "timing": timing},
                              "workload": {"trace": str(trace), "format": "mooncake"}})


def test_timing_fallback_warning(tmp_path):
    # The fit file has h100-sxm/vllm, but nothing for a100-sxm: its runs use */vllm.
    a100 = _roofline(tmp_path, "a100-sxm")
    assert a100.warnings == ["no roofline fit exists for a100-sxm with vllm: step times use the '*/vllm' fit, "
                             "fitted on other GPUs or backends, so expect larger timing errors "
                             "(engine.timing.profile names a fit)"]
    assert a100.summary["simulated"]["timing"]["profile_used"] == "*/vllm"
    assert _roofline(tmp_path, "h100-sxm").warnings == []
    assert _roofline(tmp_path, "a100-sxm", profile="*/vllm").warnings == []   # chosen, not fallen back to


def _vidur(tmp_path, timed: bool):
    path = tmp_path / "v.csv"
    head = "arrived_at," if timed else ""
    lines = [head + "num_prefill_tokens,num_decode_tokens"]
    lines += [(f"{0.5 * i}," if timed else "") + "20,3" for i in range(4)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _run_vidur(tmp_path, timed: bool, client: dict):
    cfg = fixed_config(_vidur(tmp_path, timed), client=client, **SYNC)
    cfg["workload"]["format"] = "vidur"
    return servesim.simulate(cfg)


def test_trace_without_arrival_times_warns_only_when_replayed(tmp_path):
    burst = _run_vidur(tmp_path, timed=False, client={"mode": "open_loop"})
    assert len(burst.warnings) == 1
    assert "has no arrival times, so all 4 requests arrive at time 0 as one burst" in burst.warnings[0]
    assert _run_vidur(tmp_path, timed=True, client={"mode": "open_loop"}).warnings == []
    assert _run_vidur(tmp_path, timed=False, client={"mode": "poisson", "rate": 10.0}).warnings == []
    # A synthetic workload has no arrival times either, but is no trace: no warning.
    cfg = fixed_config(tmp_path / "unused.jsonl")
    cfg["workload"] = {"synthetic": {"num_requests": 3, "input_length": 10, "output_length": 2}}
    assert servesim.simulate(cfg).warnings == []


@pytest.mark.parametrize("client", [{"mode": "closed_loop", "concurrency": 2},
                                    {"mode": "bench", "request_rate": "inf", "max_concurrency": 2}])
def test_closed_loop_ignoring_trace_times_warns(tmp_path, client):
    closed = _run_vidur(tmp_path, timed=True, client=client)
    assert len(closed.warnings) == 1 and closed.warnings[0].startswith(
        "the closed-loop client ignores the arrival times in the trace")
    assert _run_vidur(tmp_path, timed=False, client=client).warnings == []
    # A bench client with a rate re-times the trace by choice: no warning.
    assert _run_vidur(tmp_path, timed=True, client={"mode": "bench", "request_rate": 5.0}).warnings == []


# --------------------------------------------------------------------------- what was simulated


def test_simulated_block(tmp_path, run):
    rows = [{"timestamp": 0.0, "input_length": 10, "output_length": 2}]
    fast = _simulate(tmp_path, rows).summary["simulated"]
    assert fast == {
        "model": "llama-3.1-8b", "model_id": fast["model_id"], "gpu": "h100-sxm", "backend": "vllm",
        "engine_version": "0.32.0", "engine_version_followed": "vLLM 0.32.0",
        "roles": {"aggregated": {"count": 1, "tp": 1, "ep": 1, "attention_dp": 1, "pp": 1, "gpus": 1,
                                 "speculative": False, "kv_offload": False, "engine": "fast"}},
        "timing": {"kind": "fixed", "pass_ms": 10.0, "profile_used": None},
        "client": {"mode": "open_loop", "time_scale": 1.0},
        "slo": {"ttft_ms": 2000.0, "tpot_ms": 50.0, "e2e_ms": None},
        "engine": "fast",
        "engine_reason": "the default (the reference engine gives the same results, more slowly)",
    }
    assert fast["model_id"].startswith("meta-llama/")
    # A pass log no longer changes the engine: the fast engine names every request when asked.
    trace = write_trace(tmp_path / "logged.jsonl", rows)
    logged = servesim.simulate(fixed_config(trace), pass_log=io.StringIO()).summary["simulated"]
    assert (logged["engine"], logged["engine_reason"]) == (
        "fast", "the default (the reference engine gives the same results, more slowly)")
    trace = write_trace(tmp_path / "t.jsonl", rows)
    cfg = fixed_config(trace)
    cfg["engine"]["reference"] = True
    assert servesim.simulate(cfg).summary["simulated"]["engine_reason"] == "engine.reference is true"


# --------------------------------------------------------------------------- requests.csv


def test_requests_csv_trace_ids_and_errors(tmp_path):
    path = tmp_path / "ids.jsonl"
    rows = [{"timestamp": 0, "input_length": 10, "output_length": 2, "request_id": "conv-7,a"},
            {"timestamp": 1, "input_length": 2000, "output_length": 2, "request_id": 42},
            {"timestamp": 2, "input_length": 10, "output_length": 2}]
    write_trace(path, rows)
    cfg = fixed_config(path, **SYNC)
    cfg["workload"]["format"] = "servesim-jsonl"
    result = servesim.simulate(cfg)
    fh = io.StringIO()
    result.requests.write_csv(fh)
    text = fh.getvalue()
    assert ',"conv-7,a",,' in text.splitlines()[1]   # a comma in an id is quoted
    parsed = list(csv.DictReader(io.StringIO(text)))
    assert [row["trace_request_id"] for row in parsed] == ["conv-7,a", "42", ""]
    assert [row["error"] for row in parsed] == [
        "", "prompt of 2000 tokens leaves no room for output within max_model_len 1024", ""]
    assert [row["status"] for row in parsed] == ["ok", "rejected", "ok"]
    # A format without ids leaves the column empty.
    trace = write_trace(tmp_path / "m.jsonl", [{k: v for k, v in r.items() if k != "request_id"} for r in rows])
    plain = servesim.simulate(fixed_config(trace, **SYNC))
    assert [r.trace_request_id for r in plain.requests] == ["", "", ""]


# --------------------------------------------------------------------------- the CLI: --format vllm, --json

# vLLM 0.32.0 `vllm bench serve --save-result` (vllm/benchmarks/serve.py: main_async's
# set-up keys, then benchmark()'s result, then process_one_metric per metric), with
# --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,95,99 and no
# --save-detailed (which drops input_lens, output_lens, start_times, ttfts, itls,
# generated_texts and errors, but keeps latencies and queue_times).
VLLM_0_32_0_HEAD = [
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency",
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
]
VLLM_0_32_0_ARRAYS = ["input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times",
                      "generated_texts", "errors"]
VLLM_0_32_0_TAIL = ["max_output_tokens_per_s", "max_concurrent_requests", "rtfx"]


def _metric_keys(*stats: str) -> list[str]:
    return [f"{stat}_{metric}_ms" for metric in ("ttft", "tpot", "itl", "e2el") for stat in stats]


VLLM_0_32_0_KEYS = (VLLM_0_32_0_HEAD + ["latencies", "queue_times"] + VLLM_0_32_0_TAIL
                    + _metric_keys("mean", "median", "std", "p50", "p90", "p95", "p99"))


def _cli(*args, cwd=None):
    env = {**os.environ, "SOURCE_DATE_EPOCH": "0"}
    return servesim_cli(*args, cwd=cwd, env=env)


@pytest.fixture
def small_yaml(tmp_path):
    from servesim.yaml_io import dump_yaml

    rows = PEAK_ROWS + [{"timestamp": 1300.0, "input_length": 5000, "output_length": 2}]   # rejected
    cfg = fixed_config(write_trace(tmp_path / "trace.jsonl", rows), **SYNC)
    path = tmp_path / "small.yaml"
    path.write_text(dump_yaml(cfg))
    return path


def test_format_vllm_result_json(tmp_path, small_yaml):
    out = tmp_path / "o"
    proc = _cli("run", small_yaml, "--out", out, "--format", "vllm", "-q")
    assert proc.returncode == 0, proc.stderr
    data = json.loads((out / "result.json").read_text())
    assert list(data) == VLLM_0_32_0_KEYS
    assert data["date"] == "19700101-000000" and data["backend"] == "openai"
    assert (data["completed"], data["failed"], data["num_prompts"], data["total_output_tokens"]) == (2, 1, 3, 200)
    assert (data["max_output_tokens_per_s"], data["max_concurrent_requests"]) == (101.0, 2)
    # Request 0: E2E 1500 ms; request 1 (arrived 1205): 1710 - 1205 = 505 ms; the rejected one: 0.0.
    assert data["latencies"] == [1.5, 0.505, 0.0] and data["queue_times"] == [0.0, 0.0, 0.0]
    assert data["duration"] == 1.71                  # first arrival 0, last finish 1710 ms
    assert data["request_throughput"] == pytest.approx(2 / 1.71)
    # TTFTs 10 and 1220 - 1205 = 15 ms; E2Es 1500 and 505 ms: p99 = 505 + 0.99 × 995.
    assert data["mean_ttft_ms"] == 12.5 and data["p99_e2el_ms"] == pytest.approx(505 + 0.99 * 995)
    assert (out / "summary.json").exists()


def test_save_detailed_arrays(tmp_path, small_yaml):
    out = tmp_path / "d"
    proc = _cli("run", small_yaml, "--out", out, "--format", "vllm", "--save-detailed", "--metric-percentiles",
                "99.9", "-q")
    assert proc.returncode == 0, proc.stderr
    data = json.loads((out / "result.json").read_text())
    assert list(data) == (VLLM_0_32_0_HEAD + VLLM_0_32_0_ARRAYS + VLLM_0_32_0_TAIL
                          + _metric_keys("mean", "median", "std", "p99.9"))
    assert data["input_lens"] == [10, 10, 5000] and data["output_lens"] == [150, 50, 0]
    assert data["ttfts"] == [0.01, 0.015, 0.0] and data["start_times"] == [0.0, 1.205, 1.3]
    assert [len(gaps) for gaps in data["itls"]] == [149, 49, 0]
    assert set(data["itls"][0]) == {0.01}
    assert data["generated_texts"] == ["", "", ""]
    assert data["errors"] == ["", "", "prompt of 5000 tokens leaves no room for output within max_model_len 1024"]
    assert data["std_itl_ms"] == pytest.approx(0.0, abs=1e-9)


def test_json_on_stdout_table_on_stderr(tmp_path, small_yaml):
    proc = _cli("run", small_yaml, "--json", "--metric-percentiles", "50,99.9")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["p99.9_ttft_ms"] == pytest.approx(10 + 0.999 * 5)   # TTFTs 10 and 15 ms
    assert summary["warnings"] == [line.removeprefix("warning: ") for line in proc.stderr.splitlines()
                                   if line.startswith("warning: ")]
    assert "Serving Benchmark Result" in proc.stderr and "P99.9 TTFT (ms)" in proc.stderr
    assert "GPU-hours" in proc.stderr and "Peak concurrent requests" in proc.stderr
    assert "warning: 1 of 3 requests (33.3%) were rejected" in proc.stderr


@pytest.mark.parametrize("args, fragment", [
    (["--format", "vllm"], "--format vllm writes result.json into the --out folder"),
    (["--format", "csv", "--out", "o"], "--format must be servesim or vllm"),
    (["--save-detailed", "--out", "o"], "--save-detailed adds per-request arrays to result.json"),
    (["--metric-percentiles", "50,x"], "--metric-percentiles: 'x' is not a percentile"),
])
def test_report_options_refused(tmp_path, small_yaml, args, fragment):
    proc = _cli("run", small_yaml, *args, cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("timing, runs", [(None, "_varied_runs"), ({"kind": "fixed", "pass_ms": 7.0}, "_uniform_runs")])
def test_fast_runs_deliver_at_the_reference_times(tmp_path, monkeypatch, timing, runs):
    # Roofline passes differ in length, so the fast engine's runs keep their step durations;
    # fixed ones are uniform runs. Every delivery time the fast engine reports must be one
    # the reference engine delivers at, as often.
    import numpy as np

    import servesim.run as run_module
    from servesim.metrics.collector import Collector

    seen = []

    class Recording(Collector):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            seen.append(self)

    monkeypatch.setattr(run_module, "Collector", Recording)
    rows = [{"timestamp": 37.0 * i, "input_length": 30 + 50 * (i % 7), "output_length": 20 + 9 * (i % 5)}
            for i in range(30)]
    trace = write_trace(tmp_path / "r.jsonl", rows)
    cfg = {"workload": {"trace": str(trace), "format": "mooncake", "warmup_requests": 3}}
    if timing is not None:
        cfg["engine"] = {"timing": timing}
    servesim.simulate(cfg)
    reference = servesim.simulate(cfg, detailed=True)
    times, counts = seen[0].deliveries()
    fast = np.sort(np.repeat(times, counts))
    expected = np.sort(np.concatenate([np.frombuffer(t, dtype=np.int64) for t in reference.token_times.values()]))
    assert len(getattr(seen[0], runs)) > 0          # the case under test
    assert fast.tolist() == expected.tolist()
    assert len(expected) == reference.summary["total_output_tokens"]   # one token per delivery here
    assert sorted(reference.token_times) == list(range(3, 30))         # warm-up requests left out


def test_table_rows(tmp_path):
    from servesim.metrics.table import format_summary

    from tests.support.offload import ROWS, VLLM, offload

    # KV offload on (the host tier's hits shown), one warm-up request left out of 3.
    tiered = run_backend(tmp_path, ROWS, "vllm", VLLM, trace_block_size=4, role=offload(0.01))
    config = tiered.result.config.model_copy(deep=True)
    config.workload.warmup_requests = 1
    result = servesim.simulate(config, percentiles=[50, 99.9])
    lines = format_summary(result.summary, result.config)
    labels = [line.split(":")[0] for line in lines if ":" in line]
    for label in ("Warm-up requests (left out)", "Host cache hit rate (%)", "GPUs", "GPU-hours",
                  "Peak output token throughput (tok/s)", "Peak concurrent requests", "P99.9 TTFT (ms)"):
        assert label in labels, label
    assert "P50 TTFT (ms)" not in labels and "P90 TTFT (ms)" not in labels   # the median row shows 50
    assert f"{'Warm-up requests (left out):':<40} {'1':<10}" in lines
    default = servesim.simulate()
    default_labels = [line.split(":")[0] for line in format_summary(default.summary, default.config)]
    assert "Warm-up requests (left out)" not in default_labels and "Host cache hit rate (%)" not in default_labels
    assert "P95 TTFT (ms)" in default_labels and "GPU-hours" in default_labels


@pytest.mark.parametrize("client, extra", [
    # vLLM adds the client queue's statistics with a max_concurrency, and the queue-inclusive
    # E2E ones when the rate is finite too (benchmark(): queue_times, e2els_including_queue).
    ({"mode": "closed_loop", "concurrency": 2}, ["client_queue_time"]),
    ({"mode": "bench", "request_rate": 20.0, "max_concurrency": 2},
     ["client_queue_time", "e2el_including_client_queue"]),
])
def test_vllm_result_client_queue_keys(tmp_path, client, extra):
    from servesim.metrics.vllm_result import build_result

    rows = [{"timestamp": 0.0, "input_length": 10, "output_length": 3} for _ in range(4)]
    result = _simulate(tmp_path, rows, client=client)
    data = build_result(result.summary, result.requests, result.config, "m", (99.0,))
    metric_keys = [f"{stat}_{name}_ms" for name in ["ttft", "tpot", "itl", "e2el"] + extra
                   for stat in ("mean", "median", "std", "p99")]
    assert list(data) == (VLLM_0_32_0_HEAD + ["latencies", "queue_times"] + VLLM_0_32_0_TAIL + metric_keys)
    assert data["max_concurrency"] == 2
    if client["mode"] == "closed_loop":
        # Two users: requests 0 and 1 sent at 0 finish at 30 ms (prefill, 2 decodes); 2 and 3
        # are sent then. With request_rate inf all four are due at 0: queue 0, 0, 30, 30 ms.
        assert data["request_rate"] == "inf"
        assert data["queue_times"] == [0.0, 0.0, 0.03, 0.03]
        assert data["mean_client_queue_time_ms"] == 15.0


# 37 of 2,000 waiting = 1.85% <= BACKLOG_FRACTION 5% (metrics/run_warnings.py): quiet; 521 of 2,000 =
# 26.05% > 5%: warns. The counts are simulated, as docs/outputs.md shows them; time_scale 0.3 is
# 1/0.3 = 3.3x faster, 0.2 is 5x.
@pytest.mark.parametrize("time_scale, waiting, warns", [(0.3, 43, False), (0.2, 529, True)])
def test_overload_figures_docs_show(time_scale, waiting, warns):
    # docs/outputs.md: the embedded default replayed 3.3x and 5x faster.
    from servesim.metrics.run_warnings import backlog_at_last_arrival

    result = servesim.simulate(overrides=[("workload.client.time_scale", time_scale)])
    assert backlog_at_last_arrival(result.requests)[:2] == (waiting, 2000)
    assert any("offered load" in w for w in result.warnings) == warns


@pytest.mark.slow
def test_readme_mooncake_example_warns():
    from pathlib import Path

    trace = Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"
    if not trace.is_file():
        pytest.skip(f"{trace} is not there")
    result = servesim.simulate(trace=trace, overrides=[("workload.format", "mooncake")])
    assert result.warnings[0].startswith("the offered load exceeds what the deployment serves: when the last "
                                         "request arrived (at 3,537.0 s), 8,705 of the 12,031 requests served")


def test_a_ramp_up_behind_max_concurrency_is_not_a_closed_loop():
    # vLLM's ramp-up sends at rising rates (request_rate must then be inf); a max_concurrency
    # semaphore in front does not make it a closed loop, so the overload rule still applies.
    from servesim.config import BenchClient
    from servesim.metrics.run_warnings import is_closed_loop

    ramp = BenchClient(mode="bench", ramp_up_strategy="linear", ramp_up_start_rps=1, ramp_up_end_rps=50,
                       max_concurrency=8)
    assert not is_closed_loop(ramp)
    assert is_closed_loop(BenchClient(mode="bench", request_rate="inf", max_concurrency=8))
    assert not is_closed_loop(BenchClient(mode="bench", request_rate="inf"))


def test_kv_offload_says_the_reference_engine_ran():
    # cluster/fleet.py runs the exact KV cache and scheduler for a role with kv_offload.
    from servesim.config import load_config
    from servesim.cluster.engine_choice import choose_engines
    from servesim.config.resolution import resolve

    spec = resolve(load_config(None, [("engine.workers.aggregated.kv_offload", {"host_gb": 10.0, "bandwidth_gb_s": 50.0})]))
    offload = choose_engines(spec, False, False)
    assert offload.path == "reference" and offload.roles["aggregated"].exact_cache
    assert choose_engines(resolve(load_config(None)), False, False).path == "fast"
