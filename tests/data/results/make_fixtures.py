"""Writes the reader fixtures beside this script: `python tests/data/results/make_fixtures.py`.

Each file is written from its tool's source schema (the upstream file and version are in
docs/modeling/result_files.md), not by running the tool; aiperf's two files are serialised by
aiperf's own models instead (make_aiperf_fixtures.py, from the figures here). The tools cannot run: vLLM's benchmark needs a served model
and the CPU build is a 3.5 GB install, aiperf and guidellm need a live endpoint, and genai-perf
needs perf_analyzer, a binary not on the package registries. The numbers are small and round so
the tests can check the readers by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Four requests: lengths, send times (s), TTFT (s), ITL gaps (s); request 3 failed.
INPUTS = [100, 200, 300, 400]
OUTPUTS = [3, 2, 4, 0]
STARTS = [0.0, 0.5, 1.0, 1.5]
TTFTS = [0.1, 0.2, 0.3, 0.0]
ITLS = [[0.02, 0.04], [0.03], [0.01, 0.02, 0.03], []]
LATENCIES = [0.16, 0.23, 0.36, 0.0]   # TTFT + sum of gaps
ERRORS = ["", "", "", "timeout"]


def vllm_result(detailed: bool) -> dict:
    out = {"date": "20260101-000000", "endpoint_type": "vllm", "backend": "vllm", "label": None,
           "model_id": "meta-llama/Llama-3.1-8B-Instruct", "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct",
           "num_prompts": 4, "request_rate": 2.0, "burstiness": 1.0, "max_concurrency": None,
           "duration": 2.0, "completed": 3, "failed": 1, "total_input_tokens": 600, "total_output_tokens": 9,
           "request_throughput": 1.5, "request_goodput": None, "output_throughput": 4.5,
           "total_token_throughput": 304.5,
           "input_lens": INPUTS, "output_lens": OUTPUTS, "ttfts": TTFTS, "itls": ITLS, "latencies": LATENCIES,
           "start_times": STARTS, "queue_times": [0.0] * 4, "generated_texts": [""] * 4, "errors": ERRORS,
           "max_output_tokens_per_s": 5.0, "max_concurrent_requests": 2, "rtfx": 0.0,
           "mean_ttft_ms": 200.0, "median_ttft_ms": 200.0, "std_ttft_ms": 81.65, "p99_ttft_ms": 298.0,
           "mean_tpot_ms": 80 / 3, "median_tpot_ms": 30.0, "std_tpot_ms": 4.71, "p99_tpot_ms": 30.0,
           "mean_itl_ms": 25.0, "median_itl_ms": 25.0, "std_itl_ms": 10.8, "p99_itl_ms": 39.5,
           "mean_e2el_ms": 250.0, "median_e2el_ms": 230.0, "std_e2el_ms": 82.9, "p99_e2el_ms": 357.4}
    if not detailed:
        for key in ("input_lens", "output_lens", "ttfts", "itls", "start_times", "generated_texts", "errors"):
            del out[key]
    return out


def sglang_lines() -> list[dict]:
    def line(concurrency: int, ttft: float, duration: float) -> dict:
        return {"tag": None, "backend": "sglang", "dataset_name": "random", "request_rate": float("inf"),
                "max_concurrency": concurrency, "sharegpt_output_len": None, "random_input_len": 1000,
                "random_output_len": 100, "random_range_ratio": 0.5, "server_info": {"model_path":
                "meta-llama/Llama-3.1-8B-Instruct"}, "duration": duration, "completed": 10,
                "total_input_tokens": 7500, "total_output_tokens": 750, "request_throughput": 10 / duration,
                "input_throughput": 7500 / duration, "output_throughput": 750 / duration,
                "total_throughput": 8250 / duration, "mean_e2e_latency_ms": 1000.0 / concurrency,
                "median_e2e_latency_ms": 990.0, "std_e2e_latency_ms": 1.0, "p90_e2e_latency_ms": 1100.0,
                "p95_e2e_latency_ms": 1150.0, "p99_e2e_latency_ms": 1190.0, "mean_ttft_ms": ttft,
                "median_ttft_ms": ttft, "std_ttft_ms": 1.0, "p90_ttft_ms": ttft * 1.5, "p95_ttft_ms": ttft * 1.6,
                "p99_ttft_ms": ttft * 2, "mean_tpot_ms": 9.0, "median_tpot_ms": 9.0, "std_tpot_ms": 0.5,
                "p90_tpot_ms": 9.5, "p95_tpot_ms": 9.7, "p99_tpot_ms": 9.9, "mean_itl_ms": 9.0,
                "median_itl_ms": 8.9, "std_itl_ms": 1.0, "p90_itl_ms": 10.0, "p95_itl_ms": 11.0,
                "p99_itl_ms": 15.0, "concurrency": concurrency * 0.9, "accept_length": None,
                "max_output_tokens_per_s": 120.0, "max_concurrent_requests": concurrency}
    return [line(1, 40.0, 10.0), line(4, 60.0, 3.0)]


def _metric(unit: str, avg: float, p50: float, p90: float, p99: float) -> dict:
    return {"unit": unit, "avg": avg, "p1": p50, "p5": p50, "p10": p50, "p25": p50, "p50": p50, "p75": p50,
            "p90": p90, "p95": p90, "p99": p99, "min": p50, "max": p99, "std": 1.0}


def aiperf_summary() -> dict:
    return {"schema_version": "1.4", "aiperf_version": "0.13.0", "benchmark_id": "fixture",
            "request_throughput": {"unit": "requests/sec", "avg": 1.5},
            "request_latency": _metric("ms", 250.0, 230.0, 340.0, 358.0),
            "request_count": {"unit": "requests", "avg": 3.0},
            "error_request_count": {"unit": "requests", "avg": 1.0},
            "time_to_first_token": _metric("ms", 200.0, 200.0, 280.0, 298.0),
            "inter_token_latency": _metric("ms", 80 / 3, 30.0, 30.0, 30.0),
            "inter_chunk_latency": _metric("ms", 25.0, 25.0, 37.0, 39.7),
            "output_token_throughput": {"unit": "tokens/sec", "avg": 4.5},
            "output_sequence_length": _metric("tokens", 3.0, 3.0, 3.8, 3.98),
            "input_sequence_length": _metric("tokens", 200.0, 200.0, 280.0, 298.0),
            "benchmark_duration": {"unit": "sec", "avg": 2.0},
            "input_config": {"models": {"strategy": "round_robin", "items": [
                {"name": "meta-llama/Llama-3.1-8B-Instruct"}]},
                "phases": {"profiling": {"type": "concurrency", "concurrency": 2, "requests": 4}}},
            "was_cancelled": False, "is_complete": True}


def aiperf_records() -> list[dict]:
    rows = []
    for i in range(4):
        start = 1_000_000_000 + int(STARTS[i] * 1e9)
        metrics = {"input_sequence_length": {"value": INPUTS[i], "unit": "tokens"}}
        if not ERRORS[i]:
            metrics.update({"time_to_first_token": {"value": TTFTS[i] * 1e3, "unit": "ms"},
                            "request_latency": {"value": LATENCIES[i] * 1e3, "unit": "ms"},
                            "output_sequence_length": {"value": OUTPUTS[i], "unit": "tokens"},
                            "inter_chunk_latency": {"value": [g * 1e3 for g in ITLS[i]], "unit": "ms"}})
        rows.append({"metadata": {"session_num": i, "request_start_ns": start, "request_end_ns": start + 1,
                                  "worker_id": "w0", "record_processor_id": "r0", "benchmark_phase": "profiling"},
                     "metrics": metrics, "error": {"code": 504, "message": "timeout"} if ERRORS[i] else None})
    return rows


def genai_perf_summary() -> dict:
    return {"request_throughput": {"unit": "requests/sec", "avg": 1.5},
            "request_latency": _metric("ms", 250.0, 230.0, 340.0, 358.0),
            "time_to_first_token": _metric("ms", 200.0, 200.0, 280.0, 298.0),
            "inter_token_latency": _metric("ms", 80 / 3, 30.0, 30.0, 30.0),
            "output_token_throughput": {"unit": "tokens/sec", "avg": 4.5},
            "output_sequence_length": _metric("tokens", 3.0, 3.0, 3.8, 3.98),
            "input_sequence_length": _metric("tokens", 200.0, 200.0, 280.0, 298.0),
            "input_config": {"model": ["meta-llama/Llama-3.1-8B-Instruct"], "backend": "vllm",
                             "endpoint_type": "chat", "concurrency": 2, "request_rate": None, "request_count": 3,
                             "synthetic_input_tokens_mean": 200, "output_tokens_mean": 3,
                             "profile_export_file": "profile_export.json", "artifact_dir": "artifacts"}}


def genai_perf_records() -> dict:
    requests = []
    for i in range(3):
        start = 5_000_000_000 + int(STARTS[i] * 1e9)
        first = start + int(TTFTS[i] * 1e9)
        stamps = [first]
        for gap in ITLS[i]:
            stamps.append(stamps[-1] + int(round(gap * 1e9)))
        requests.append({"timestamp": start, "request_inputs": {"payload": "{}"},
                         "response_timestamps": stamps, "response_outputs": [{"response": "{}"}] * len(stamps)})
    return {"experiments": [{"experiment": {"mode": "concurrency", "value": 2}, "requests": requests,
                             "window_boundaries": [5_000_000_000, 7_000_000_000]}], "version": "fixture"}


def _status(mean: float, median: float, p90: float, p99: float) -> dict:
    one = {"mean": mean, "median": median, "mode": median, "variance": 1.0, "std_dev": 1.0, "min": median,
           "max": p99, "count": 10, "total_sum": mean * 10,
           "percentiles": {"p001": median, "p01": median, "p05": median, "p10": median, "p25": median,
                           "p50": median, "p75": median, "p90": p90, "p95": p90, "p99": p99, "p999": p99}}
    return {"successful": one, "incomplete": None, "errored": None, "total": one}


def guidellm_report() -> dict:
    def bench(strategy: dict, ttft: float) -> dict:
        return {"type_": "generative_benchmark", "config": {"strategy": strategy}, "duration": 20.0,
                "metrics": {"request_totals": {"successful": 10, "errored": 0, "incomplete": 0, "total": 10},
                            "requests_per_second": _status(0.5, 0.5, 0.6, 0.7),
                            "request_latency": _status(1.2, 1.1, 1.5, 1.9),
                            "prompt_token_count": _status(512.0, 512.0, 512.0, 512.0),
                            "output_token_count": _status(128.0, 128.0, 128.0, 128.0),
                            "time_to_first_token_ms": _status(ttft, ttft, ttft * 1.2, ttft * 1.5),
                            "time_per_output_token_ms": _status(8.0, 8.0, 9.0, 10.0),
                            "inter_token_latency_ms": _status(8.1, 8.0, 9.0, 10.0),
                            "output_tokens_per_second": _status(64.0, 64.0, 70.0, 80.0),
                            "tokens_per_second": _status(320.0, 320.0, 330.0, 340.0)}}
    return {"metadata": {"version": "0.8.1"}, "config": {}, "benchmarks": [
        bench({"type_": "concurrent", "streams": 2}, 50.0), bench({"type_": "constant", "rate": 0.5}, 40.0)]}


def _write(name: str, data) -> None:
    path = HERE / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def main() -> None:
    _write("vllm_detailed.json", vllm_result(True))
    _write("vllm_summary.json", vllm_result(False))
    (HERE / "sglang.jsonl").write_text("".join(json.dumps(x) + "\n" for x in sglang_lines()), encoding="utf-8")
    _write("genai_perf/profile_export_genai_perf.json", genai_perf_summary())
    _write("genai_perf/profile_export.json", genai_perf_records())
    _write("guidellm.json", guidellm_report())


if __name__ == "__main__":
    main()
