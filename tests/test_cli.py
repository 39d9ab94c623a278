"""The CLI end to end, in a subprocess: exit codes, files, and one-sentence errors."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import pytest
import yaml

from tests.support.cli import servesim_cli

SMALL = """\
engine:
  timing: {kind: fixed, pass_ms: 10.0}
  workers:
    aggregated:
      scheduler: {num_gpu_blocks: 200, max_model_len: 512, max_num_seqs: 16, max_num_batched_tokens: 256}
workload:
  synthetic: {num_requests: 20, input_length: {min: 10, max: 100}, output_length: {min: 1, max: 30}}
  client: {mode: closed_loop, concurrency: 4}
"""


@pytest.fixture
def small(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    return path


def test_default_run_prints_the_summary():
    proc = servesim_cli("run")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Successful requests:" in out and "2,000" in out
    for label in ("Mean TTFT (ms)", "P99 TPOT (ms)", "Median ITL (ms)", "P90 E2E (ms)", "Request goodput (req/s)",
                  "Output token throughput (tok/s)", "Simulator wall time (s)"):
        assert label in out


def test_out_files(tmp_path, small):
    out = tmp_path / "out"
    passes = tmp_path / "passes.jsonl"
    proc = servesim_cli("run", small, "--out", out, "--passes", passes, "--seed", 3)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == [".servesim-output", "config.resolved.yaml", "requests.csv",
                                                     "summary.json", "workers.csv"]
    assert (out / "workers.csv").read_text().splitlines()[1].startswith("aggregated-0,aggregated,")
    # The folder is staged and swapped in, but gets the mode mkdir gives under the umask, not mkdtemp's 0700.
    umask = os.umask(0o022)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o777 & ~umask
    with open(out / "requests.csv") as fh:
        rows = list(csv.reader(fh))
    assert rows[0][:11] == ["request_id", "arrival_ms", "first_token_ms", "finish_ms", "input_length",
                            "output_length", "cached_tokens", "preemptions", "worker", "ttft_ms", "e2e_ms"]
    assert [int(r[0]) for r in rows[1:]] == list(range(20))
    assert {r[8] for r in rows[1:]} == {"aggregated-0"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completed"] == 20 and summary["trace_format"] == "synthetic"
    for key in ("servesim_version", "config_hash", "trace_sha256", "wall_time_ms", "request_goodput_req_s"):
        assert key in summary
    resolved = yaml.safe_load((out / "config.resolved.yaml").read_text())
    assert resolved["seed"] == 3
    assert resolved["engine"]["workers"]["aggregated"]["scheduler"]["async_scheduling"] is True
    lines = [json.loads(line) for line in passes.read_text().splitlines()]
    assert lines[0]["worker"] == "aggregated-0" and lines[0]["pass"] == 0
    assert set(lines[0]) >= {"start_ms", "end_ms", "scheduled", "preempted", "finished", "free_blocks"}
    assert not [p for p in tmp_path.rglob("*.tmp")]


def test_same_seed_same_bytes(tmp_path, small):
    for name in ("a", "b"):
        assert servesim_cli("run", small, "--out", tmp_path / name, "--passes", tmp_path / f"{name}.jsonl",
                        "-q").returncode == 0
    assert (tmp_path / "a" / "requests.csv").read_bytes() == (tmp_path / "b" / "requests.csv").read_bytes()
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    servesim_cli("run", small, "--out", tmp_path / "c", "--seed", 99, "-q")
    assert (tmp_path / "a" / "requests.csv").read_bytes() != (tmp_path / "c" / "requests.csv").read_bytes()


def test_set_overrides(tmp_path, small):
    out = tmp_path / "o"
    proc = servesim_cli("run", small, "--out", out, "-q", "--set", "engine.timing.pass_ms=20",
                    "--set", "workload.synthetic.num_requests=5")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "summary.json").read_text())["completed"] == 5


def test_trace_option_replaces_the_workload(tmp_path, small):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 20, "output_length": 3}\n'
                     '{"timestamp": 5, "input_length": 30, "output_length": 2}\n')
    out = tmp_path / "o"
    proc = servesim_cli("run", small, "--trace", trace, "--out", out, "-q", "--set", "workload.client={mode: open_loop}")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completed"] == 2 and summary["trace_format"] == "mooncake"


@pytest.mark.parametrize("args,fragment", [
    (["--set", "engine.workers.aggregated.scheduler.async_scheduling=1"], "must be true or false, got 1"),
    (["--set", "engine.workers.aggregated.scheduler.async_scheduling=on"], 'got "on"'),
    (["--set", "engine.workers.aggregated.scheduler.block_size=0"], "block_size: input should be greater than 0"),
    (["--set", "engine.nope=3"], "unknown key engine.nope"),
    (["--set", "novalue"], "expected dotted.key=VALUE"),
    # An empty key or key segment is named as the --set's, not as simulate()'s API argument.
    (["--set", "=3"], "--set '=3': the key must be a dotted path like engine.timing.kind"),
    (["--set", "engine..backend=vllm"], "--set 'engine..backend=vllm': the key must be a dotted path"),
    (["--set", "engine.workers.aggregated.scheduler.max_model_len=100000"], "tokens short"),
    # The file's vLLM keys are carried over to SGLang (tests/test_overrides.py); one the --set gives is not.
    (["--set", "engine.backend=sglang", "--set", "engine.workers.aggregated.scheduler.num_gpu_blocks=100"],
     "num_gpu_blocks is a vLLM setting, not valid with engine.backend sglang"),
])
def test_bad_input_exits_2_with_one_sentence(tmp_path, small, args, fragment):
    out = tmp_path / "never"
    proc = servesim_cli("run", small, "--out", out, *args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert fragment in lines[0]
    assert "Traceback" not in proc.stderr
    assert not out.exists()


def test_bad_trace_line_names_file_and_line(tmp_path, small):
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 20, "output_length": 3}\n{"timestamp": 1}\n')
    proc = servesim_cli("run", small, "--trace", trace, "--out", tmp_path / "o")
    assert proc.returncode == 2
    assert f"{trace} line 2" in proc.stderr
    assert not (tmp_path / "o").exists()


def test_missing_files(tmp_path, small):
    proc = servesim_cli("run", tmp_path / "nope.yaml")
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    proc = servesim_cli("run", small, "--trace", tmp_path / "nope.jsonl")
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_unknown_key_in_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(SMALL + "colour: blue\n")
    proc = servesim_cli("run", path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {path}: unknown key colour"


def test_failed_run_keeps_existing_outputs(tmp_path, small):
    out = tmp_path / "o"
    assert servesim_cli("run", small, "--out", out, "-q").returncode == 0
    before = (out / "summary.json").read_bytes()
    proc = servesim_cli("run", small, "--out", out, "--set", "engine.timing.pass_ms=-1")
    assert proc.returncode == 2
    assert (out / "summary.json").read_bytes() == before
    assert sorted(p.name for p in out.iterdir()) == [".servesim-output", "config.resolved.yaml", "requests.csv",
                                                     "summary.json", "workers.csv"]


def test_python_api_matches_cli(tmp_path, small):
    import servesim as api

    result = api.simulate(small)
    out = tmp_path / "o"
    servesim_cli("run", small, "--out", out, "-q")
    summary = json.loads((out / "summary.json").read_text())
    api_summary = json.loads(json.dumps(result.summary))
    for key in summary:
        if key != "wall_time_ms":
            assert summary[key] == api_summary[key], key


def test_speculative_reports_acceptance_length(tmp_path, small):
    out = tmp_path / "o"
    proc = servesim_cli("run", small, "-q", "--out", out, "--set",
                    "engine.workers.aggregated.speculative={method: eagle, num_speculative_tokens: 2, acceptance_rate: 0.7}")
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    # Expected 1 + 0.7 + 0.49 = 2.19 tokens per verification; a small run samples it loosely.
    assert 1.5 < summary["mean_acceptance_length"] < 2.9


def test_every_benchmark_row_is_a_valid_config():
    from servesim.bench import config_for, workloads
    from servesim.config import load_config

    rows = workloads()
    assert {"2s", "2t"} <= {w.key for w in rows}
    for workload in (w for w in rows if not w.recommend):
        for timing in ("fixed", "roofline"):
            config = load_config(config_for(workload, timing)).config
            assert config.engine.backend == workload.backend
