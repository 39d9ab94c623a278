"""The result-file readers (servesim/validate/readers/) on the fixtures of tests/data/results/.

The fixtures hold four requests (inputs 100, 200, 300, 400; outputs 3, 2, 4 and a failed one;
sent at 0, 0.5, 1.0, 1.5 s; TTFT 0.1, 0.2, 0.3 s; gaps [20, 40], [30], [10, 20, 30] ms), or for
SGLang and guidellm summary figures only (make_fixtures.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servesim.errors import ServesimError
from servesim.validate.readers import read_results
from servesim.validate.rebuild import workload_for

DATA = Path(__file__).parent / "data" / "results"


def _one(name: str):
    runs = read_results(DATA / name)
    assert len(runs) == 1
    return runs[0]


def test_vllm_detailed_result_reads_its_summary_and_fills_p90_from_the_requests():
    run = _one("vllm_detailed.json")
    assert (run.tool, run.num_requests, run.completed, run.failed) == ("vllm", 4, 3, 1)
    assert run.model == "meta-llama/Llama-3.1-8B-Instruct" and run.engine == "vllm"
    assert (run.request_rate, run.burstiness, run.max_concurrency) == (2.0, 1.0, None)
    assert run.detailed and run.input_lens == [100, 200, 300, 400] and run.start_times == [0.0, 0.5, 1.0, 1.5]
    assert run.ttfts == [0.1, 0.2, 0.3]     # the failed request left out
    # The file's own figures are kept; p90 (not in a default vLLM result) comes from the requests:
    # TTFT sorted 100, 200, 300 ms: numpy's p90 at index 0.9·2 = 1.8 → 200 + 0.8·100 = 280.
    assert run.stats["ttft"] == {"mean": 200.0, "median": 200.0, "p90": pytest.approx(280.0), "p99": 298.0}
    # TPOT per request: (0.16−0.1)/2 = 30, (0.23−0.2)/1 = 30, (0.36−0.3)/3 = 20 ms → p90 at 1.8 = 30.
    assert run.stats["tpot"]["p90"] == pytest.approx(30.0)
    # ITL gaps 10, 20, 20, 30, 30, 40 ms → p90 at index 4.5 = 35.
    assert run.stats["itl"]["p90"] == pytest.approx(35.0)
    # E2E 160, 230, 360 ms → p90 at 1.8 = 230 + 0.8·130 = 334.
    assert run.stats["e2e"]["p90"] == pytest.approx(334.0)
    assert run.rates == {"request_throughput": 1.5, "output_throughput": 4.5, "total_token_throughput": 304.5}
    assert run.duration_s == 2.0


def test_vllm_result_without_details_has_no_p90_and_rebuilds_from_its_means(tmp_path):
    run = _one("vllm_summary.json")
    assert not run.detailed and run.stats["ttft"]["p90"] is None and run.stats["ttft"]["p99"] == 298.0
    # 600 input and 9 output tokens over 3 completed requests: 200 and 3 each, for all 4 sent.
    assert workload_for(run, tmp_path) == {
        "synthetic": {"num_requests": 4, "input_length": 200, "output_length": 3},
        "client": {"mode": "bench", "request_rate": 2.0, "burstiness": 1.0}}


def test_vllm_detailed_result_replays_its_send_times_and_lengths(tmp_path):
    workload = workload_for(_one("vllm_detailed.json"), tmp_path)
    assert workload["client"] == {"mode": "open_loop"} and workload["format"] == "servesim-jsonl"
    rows = [json.loads(line) for line in Path(workload["trace"]).read_text().splitlines()]
    # The failed request's recorded output 0 takes the successful mean, (3 + 2 + 4) / 3 = 3.
    assert [(r["timestamp"], r["input_length"], r["output_length"]) for r in rows] == [
        (0.0, 100, 3), (500.0, 200, 2), (1000.0, 300, 4), (1500.0, 400, 3)]


def test_sglang_jsonl_gives_one_run_per_line_and_its_random_lengths(tmp_path):
    runs = read_results(DATA / "sglang.jsonl")
    assert [r.label for r in runs] == ["sglang.jsonl#1", "sglang.jsonl#2"]
    assert [r.max_concurrency for r in runs] == [1, 4] and runs[0].request_rate == "inf"
    assert runs[1].stats["e2e"]["mean"] == 250.0 and runs[1].duration_s == 3.0 and runs[0].engine == "sglang"
    # SGLang's random lengths: uniform in [max(int(L·r), 1), L]: 500..1000 and 50..100.
    assert workload_for(runs[0], tmp_path) == {
        "synthetic": {"num_requests": 10, "input_length": {"min": 500, "max": 1000},
                      "output_length": {"min": 50, "max": 100}},
        "client": {"mode": "bench", "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 1}}


@pytest.mark.parametrize("name", ["aiperf/profile_export_aiperf.json", "aiperf/profile_export.jsonl"])
def test_aiperf_summary_and_records_read_as_one_run(name):
    run = _one(name)
    assert (run.tool, run.num_requests, run.completed, run.failed, run.max_concurrency) == ("aiperf", 4, 3, 1, 2)
    assert run.stats["tpot"]["mean"] == pytest.approx(80 / 3)     # aiperf's inter_token_latency is TPOT
    assert run.stats["itl"]["p90"] == 37.0                         # inter_chunk_latency, as reported
    assert run.input_lens == [100, 200, 300, 400] and run.start_times == [0.0, 0.5, 1.0, 1.5]
    assert run.ttfts == pytest.approx([0.1, 0.2, 0.3]) and run.duration_s == 2.0


def test_genai_perf_summary_takes_times_from_its_per_request_export():
    run = _one("genai_perf/profile_export_genai_perf.json")
    assert (run.tool, run.num_requests, run.max_concurrency, run.engine) == ("genai-perf", 3, 2, "vllm")
    assert run.start_times == [0.0, 0.5, 1.0] and run.ttfts == pytest.approx([0.1, 0.2, 0.3])
    # Last response: request 2 sent at 1.0 s, first token 0.3 s later, gaps 10 + 20 + 30 ms → 1.36 s.
    assert run.duration_s == pytest.approx(1.36)
    assert not run.detailed   # no token counts per request: lengths are the summary's means
    assert (run.mean_input_length, run.mean_output_length) == (200.0, 3.0)


def test_guidellm_report_gives_one_run_per_benchmark():
    runs = read_results(DATA / "guidellm.json")
    assert [(r.request_rate, r.burstiness, r.max_concurrency) for r in runs] == [("inf", None, 2), (0.5, "inf", None)]
    assert runs[0].stats["e2e"] == {"mean": 1200.0, "median": 1100.0, "p90": 1500.0, "p99": 1900.0}  # s → ms
    assert runs[1].stats["ttft"]["p90"] == 48.0 and runs[0].rates["output_throughput"] == 64.0


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, says", [
    (json.dumps({k: v for k, v in json.loads((DATA / "vllm_summary.json").read_text()).items() if k != "completed"}),
     "this vllm bench serve result has no 'completed', which the comparison needs"),
    (json.dumps({"servesim_version": "1", "duration_ms": 3}), "servesim's own summary.json"),
    (json.dumps({"hello": 1}), "is not a result file servesim reads"),
    ("TIMESTAMP,ContextTokens\n1,2\n", "is not JSON"),
    ("", "is empty"),
    ((DATA / "sglang.jsonl").read_text().splitlines()[0] + "\n" + json.dumps({"num_prompts": 1, "ttfts": []}) + "\n",
     "line 2 is not a SGLang bench_serving result like line 1"),
    (json.dumps({"benchmarks": [{"metrics": {}, "config": {"strategy": {"type_": "sweep"}}}]}),
     "strategy 'sweep' cannot be rebuilt"),
])
def test_a_file_missing_what_a_comparison_needs_is_one_sentence(tmp_path, text, says):
    path = _write(tmp_path, "r.json", text)
    with pytest.raises(ServesimError) as err:
        read_results(path)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_genai_perf_per_request_file_alone_is_named_and_pointed_at_its_summary(tmp_path):
    path = _write(tmp_path, "profile_export.json", (DATA / "genai_perf" / "profile_export.json").read_text())
    with pytest.raises(ServesimError, match="genai-perf's per-request profile_export.json"):
        read_results(path)


def test_fixtures_are_what_their_script_writes(tmp_path, monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_fixtures", DATA / "make_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "HERE", tmp_path)
    module.main()
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert path.read_bytes() == (DATA / path.relative_to(tmp_path)).read_bytes(), path


def test_vllm_metadata_records_the_random_dataset(tmp_path):
    data = json.loads((DATA / "vllm_summary.json").read_text())
    # `--metadata random_input_len=1000 random_output_len=10 random_range_ratio=0.25`: text values.
    data.update(random_input_len="1000", random_output_len="10", random_range_ratio="0.25")
    path = _write(tmp_path, "r.json", json.dumps(data))
    # vLLM's interval [floor(L(1−r)), ceil(L(1+r))]: 750..1250 and 7..13 (7.5 floors to 7, 12.5 ceils to 13).
    assert workload_for(read_results(path)[0], tmp_path)["synthetic"] == {
        "num_requests": 4, "input_length": {"min": 750, "max": 1250}, "output_length": {"min": 7, "max": 13}}
    data["random_range_ratio"] = "1.5"
    path.write_text(json.dumps(data))
    with pytest.raises(ServesimError, match="are out of range"):
        read_results(path)


SERVE_CONFIG = """\
model: llama-3.1-8b
gpu: h100-sxm
workload:
  synthetic: {num_requests: 1, input_length: 16, output_length: 4}
"""


def _simulated_time(result: dict, speed: float) -> dict:
    """A result measured against `servesim serve --speed S`, in the simulation's time (wall × S)."""
    out = dict(result)
    for key in ("ttfts", "start_times", "latencies"):
        out[key] = [t * speed for t in result[key]]
    out["itls"] = [[t * speed for t in gaps] for gaps in result["itls"]]
    out["duration"] = result["duration"] * speed
    for key, value in result.items():
        if key.endswith("_ms") and isinstance(value, (int, float)):
            out[key] = value * speed
        elif key.endswith("throughput") and isinstance(value, (int, float)):
            out[key] = value / speed
    return out


def test_vllm_bench_serve_own_file_against_servesim_serve(tmp_path):
    # Written by vLLM 0.32.0's own benchmark code (make_vllm_bench_fixture.py) against `servesim serve`
    # at --speed 0.05: 16 requests of 256 + 32 tokens, 4 at a time.
    run = _one("vllm_bench_against_serve.json")
    assert (run.tool, run.num_requests, run.completed, run.failed, run.max_concurrency) == ("vllm", 16, 16, 0, 4)
    assert run.detailed and set(run.input_lens) == {256} and run.output_lens == [32] * 16
    # In simulated time the client measured what the server simulated plus its HTTP path (longer TTFT).
    # validate replays the file as a 4-user bench client started together, where the live client's
    # sends were staggered by that path: on this file mean TTFT comes out 5.5% short, mean TPOT 2.6%,
    # mean E2E 3.1% (median TPOT 0.1%).
    raw = json.loads((DATA / "vllm_bench_against_serve.json").read_text())
    (tmp_path / "r.json").write_text(json.dumps(_simulated_time(raw, 0.05)))
    (tmp_path / "c.yaml").write_text(SERVE_CONFIG)
    from servesim.validate.compare import compare_files

    figures = compare_files([tmp_path / "r.json"], tmp_path / "c.yaml")[0].figures
    assert -10 < figures["mean_ttft_ms"]["error_pct"] < 0
    assert abs(figures["mean_tpot_ms"]["error_pct"]) < 5 and abs(figures["median_tpot_ms"]["error_pct"]) < 1
    assert abs(figures["mean_e2e_ms"]["error_pct"]) < 5
