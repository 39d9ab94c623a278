"""`servesim validate`: round trips through servesim's own --format vllm files, the CLI's exits and files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from servesim.cli import app
from servesim.metrics.vllm_result import build_result
from servesim.run import simulate
from servesim.validate.compare import FIGURES, compare_run, figure_value, signed_error
from servesim.validate.readers import read_results, vllm

DATA = Path(__file__).parent / "data" / "results"
DEPLOYMENT = {
    "model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": {"backend": "vllm", "timing": {"kind": "roofline"}},
    "workload": {"synthetic": {"num_requests": 24, "input_length": {"min": 100, "max": 700},
                               "output_length": {"min": 5, "max": 40}},
                 "client": {"mode": "bench", "request_rate": 10.0}},
}


def _config(tmp_path: Path, name: str = "d.yaml", **timing) -> Path:
    data = json.loads(json.dumps(DEPLOYMENT))
    data["engine"]["timing"].update(timing)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def _result_file(config: Path, tmp_path: Path, client: dict | None = None) -> tuple[Path, dict]:
    """`servesim run --format vllm --save-detailed`'s result.json of `config` (metrics/vllm_result.py)."""
    overrides = [("workload.client", client)] if client else []
    result = simulate(config, overrides=overrides, detailed=True)
    data = build_result(result.summary, result.requests, result.config, result.summary["simulated"]["model_id"],
                        (50, 90, 95, 99), result.token_times, save_detailed=True)
    path = tmp_path / "result.json"
    path.write_text(json.dumps(data))
    return path, data


@pytest.mark.parametrize("client", [None, {"mode": "bench", "request_rate": "inf", "max_concurrency": 3}],
                         ids=["open-loop", "max-concurrency"])
def test_a_run_validated_with_its_own_config_has_no_error(tmp_path, client):
    config = _config(tmp_path)
    path, _ = _result_file(config, tmp_path, client)
    comparison = compare_run(read_results(path)[0], config)
    assert len(comparison.figures) == len(FIGURES)     # every figure compared
    for name, figure in comparison.figures.items():
        assert figure["error_pct"] == pytest.approx(0.0, abs=1e-9), name
    assert comparison.warnings == []


def test_with_another_timing_profile_the_errors_are_those_between_the_two_runs(tmp_path):
    measured_path, _ = _result_file(_config(tmp_path), tmp_path)
    other = _config(tmp_path, "other.yaml", gemm_efficiency=0.3, pass_overhead_ms=3.0)
    comparison = compare_run(read_results(measured_path)[0], other)
    # By hand: run the other deployment on the same workload itself, and compare the two files.
    sub = tmp_path / "other"
    sub.mkdir()
    _, direct = _result_file(other, sub)
    measured, predicted = read_results(measured_path)[0], vllm.read(direct, sub / "result.json")
    slower = 0
    for name in FIGURES:
        expected = signed_error(figure_value(measured, name), figure_value(predicted, name))
        assert comparison.figures[name]["error_pct"] == pytest.approx(expected, rel=1e-9, abs=1e-9), name
        slower += expected > 1.0
    assert slower >= 8    # a 3 ms pass overhead and 0.3 GEMM efficiency are visibly slower


def test_cli_prints_the_table_writes_its_files_and_fails_above_the_threshold(tmp_path):
    config = _config(tmp_path)
    path, _ = _result_file(config, tmp_path)
    other = _config(tmp_path, "other.yaml", pass_overhead_ms=3.0)
    runner = CliRunner()
    ok = runner.invoke(app, ["validate", str(path), "--config", str(config), "--fail-above", "0.001",
                             "--out", str(tmp_path / "v")])
    assert ok.exit_code == 0, ok.output
    assert "mean TTFT (ms)" in ok.output and "+0.0%" in ok.output
    written = sorted(p.relative_to(tmp_path / "v").as_posix() for p in (tmp_path / "v").rglob("*") if p.is_file())
    assert written == [".servesim-output", "comparison.csv", "comparison.json", "runs/result.json/itl_cdf.png",
                       "runs/result.json/requests.csv", "runs/result.json/result.json",
                       "runs/result.json/summary.json", "runs/result.json/ttft_cdf.png",
                       "runs/result.json/ttft_scatter.png"]
    rows = (tmp_path / "v" / "comparison.csv").read_text().splitlines()
    assert rows[0] == "run,tool,figure,measured,predicted,error_pct" and len(rows) == 1 + len(FIGURES)
    bad = runner.invoke(app, ["validate", str(path), "--config", str(other), "--fail-above", "1"])
    assert bad.exit_code == 1
    assert "above --fail-above 1%" in bad.output


def test_several_files_give_one_row_each_and_a_plot_against_concurrency(tmp_path):
    config = _config(tmp_path)
    runner = CliRunner()
    result = runner.invoke(app, ["validate", str(DATA / "sglang.jsonl"), str(DATA / "guidellm.json"),
                                 "--config", str(config), "--out", str(tmp_path / "v")])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [line.split()[0] for line in lines if line.startswith(("sglang", "guidellm"))] == [
        "sglang.jsonl#1", "sglang.jsonl#2", "guidellm.json#0", "guidellm.json#1"]
    assert "measured on engine sglang but --config simulates vllm" in result.output
    assert (tmp_path / "v" / "concurrency.png").is_file()
    data = json.loads((tmp_path / "v" / "comparison.json").read_text())
    assert [run["concurrency"] for run in data["runs"]] == [1.0, 4.0, 2.0, None]


def test_a_model_mismatch_and_failed_requests_are_warnings(tmp_path):
    config = _config(tmp_path)
    data = json.loads((DATA / "vllm_detailed.json").read_text())
    data["model_id"] = "Qwen/Qwen2.5-7B-Instruct"
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    comparison = compare_run(read_results(path)[0], config)
    assert comparison.warnings == [
        "r.json was measured on model 'Qwen/Qwen2.5-7B-Instruct' but --config simulates 'llama-3.1-8b'; the "
        "comparison is of different models",
        "r.json: 1 of 4 measured requests failed; their figures leave them out, the simulation serves them all"]
    same = compare_run(read_results(DATA / "vllm_detailed.json")[0], config)
    assert not any("model" in w for w in same.warnings)   # the HF id of the simulated model


@pytest.mark.parametrize("args, says", [
    (["--fail-above", "-1"], "--fail-above must be a percentage of at least 0"),
    (["--config", "{d}/missing.yaml"], "--config {d}/missing.yaml does not exist"),
])
def test_bad_options_are_one_sentence(tmp_path, args, says):
    base = ["validate", str(DATA / "vllm_summary.json"), "--config", str(_config(tmp_path))]
    args = [a.replace("{d}", str(tmp_path)) for a in args]
    result = CliRunner().invoke(app, base + args)
    assert result.exit_code == 2
    assert says.replace("{d}", str(tmp_path)) in result.output


def test_a_hand_checked_comparison_on_the_vllm_fixture(tmp_path):
    # Fixed 10 ms passes (request path off): each of the four requests, sent 0.5 s apart, runs
    # alone: TTFT one pass, then one pass per token. Outputs 3, 2, 4 and, for the failed request
    # (recorded 0), the successful mean 3 → E2E 30, 20, 40, 30 ms.
    config = _write_fixed(tmp_path)
    c = compare_run(read_results(DATA / "vllm_detailed.json")[0], config)
    f = {name: (v["measured"], v["predicted"], v["error_pct"]) for name, v in c.figures.items()}
    assert f["mean_ttft_ms"] == (200.0, 10.0, -95.0)                       # (10 − 200) / 200
    assert f["mean_tpot_ms"] == pytest.approx((80 / 3, 10.0, -62.5))        # (10 − 26.67) / 26.67
    assert f["mean_itl_ms"] == pytest.approx((25.0, 10.0, -60.0))
    assert f["mean_e2e_ms"] == pytest.approx((250.0, 30.0, -88.0))
    assert f["p90_e2e_ms"][1] == pytest.approx(37.0)     # sorted 20, 30, 30, 40: index 2.7 → 37
    # The last request finishes at 1.5 s + 30 ms: 4 requests in 1.53 s, 12 output and 1,000 input tokens.
    assert f["duration_s"] == pytest.approx((2.0, 1.53, -23.5))
    assert f["request_throughput"][1] == pytest.approx(4 / 1.53)
    assert f["total_token_throughput"][1] == pytest.approx(1012 / 1.53)


def _write_fixed(tmp_path: Path) -> Path:
    path = tmp_path / "fixed.yaml"
    path.write_text(yaml.safe_dump({"engine": {"timing": {"kind": "fixed", "pass_ms": 10.0}},
                                    "workload": {"synthetic": {"num_requests": 1, "input_length": 1,
                                                               "output_length": 1}}}))
    return path
