"""`servesim bench` as a user meets it: real options, errors for rows it cannot run, and a run
from an installed-like package in a folder outside the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import servesim
from servesim import bench
from servesim.errors import ServesimError

ROW_KEYS = ["1a", "1b", "2a", "2b", "2s", "2t", "3", "4", "5", "5r", "5d", "6", "7", "8"]
TRACE_ROWS = ["5", "5r", "5d", "6", "8"]


@pytest.fixture
def servesim_cli(capsys):
    """The command line in this process (as `servesim.cli.main` runs it): (status, stdout, stderr)."""
    from servesim.cli import app
    from servesim.cli_usage import run_app

    def call(*args):
        status = run_app(app, [str(a) for a in args])
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(args, status, out, err)

    return call


def one_error_line(proc) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_help_lists_every_option(servesim_cli):
    proc = servesim_cli("bench", "--help")
    assert proc.returncode == 0, proc.stderr
    for option in ("--only", "--timing", "--repeat", "--traces", "--vs"):
        assert option in proc.stdout


def test_an_unknown_row_is_an_error_listing_the_rows(servesim_cli):
    line = one_error_line(servesim_cli("bench", "--only", "1a,9z"))
    assert "unknown row 9z" in line and ", ".join(ROW_KEYS) in line


def test_a_requested_row_without_its_trace_names_traces(servesim_cli, tmp_path):
    line = one_error_line(servesim_cli("bench", "--only", "5", "--traces", tmp_path))
    assert "--traces" in line and str(tmp_path / "mooncake" / "conversation_trace.jsonl") in line


@pytest.mark.parametrize("args, words", [
    (["--timing", "fast"], "unknown timing kind fast"),
    (["--repeat", "0"], "--repeat must be at least 1, got 0"),
    (["--vs", "vidur", "python"], "only aisimulate"),
    (["--traces", "/nonexistent-folder"], "is not a folder"),
])
def test_bad_options_are_one_line(servesim_cli, args, words):
    assert words in one_error_line(servesim_cli("bench", *args))


def test_the_default_set_skips_rows_without_traces(tmp_path):
    chosen, skipped = bench.select_rows("", tmp_path)
    assert [w.key for w in chosen] == [k for k in ROW_KEYS if k not in TRACE_ROWS]
    assert [w.key for w in skipped] == TRACE_ROWS
    note = bench._skipped_note(skipped, tmp_path)
    assert note == f"note: skipped rows 5, 5r, 5d, 6, 8: their traces are not in {tmp_path}; give --traces DIR to run them"
    # With the traces there, nothing is skipped.
    (tmp_path / "mooncake").mkdir()
    (tmp_path / "mooncake" / "conversation_trace.jsonl").write_text("")
    (tmp_path / "azure_llm_2023").mkdir()
    (tmp_path / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv").write_text("")
    chosen, skipped = bench.select_rows("", tmp_path)
    assert [w.key for w in chosen] == ROW_KEYS and skipped == []
    with pytest.raises(ServesimError, match="unknown row 9z"):
        bench.select_rows("9z", tmp_path)


def test_the_recommend_row_is_the_readme_example():
    """Row 8 times the README's `servesim recommend` line: the same options, and the workload of
    docs/examples/azure_conv_2x.yaml with its trace found under --traces."""
    import re

    import yaml

    checkout = Path(bench.__file__).resolve().parents[2]
    if not (checkout / "README.md").is_file():
        pytest.skip("needs the source checkout")
    readme = (checkout / "README.md").read_text()
    command = re.search(r"\$ servesim recommend (.*?)\n(?!    )", readme, re.S).group(1).replace("\\\n", " ")
    words = command.split()
    at = words.index("--workload")
    assert words[at + 1] == "docs/examples/azure_conv_2x.yaml"
    assert words[:at] + words[at + 2:] == bench.RECOMMEND_ARGS
    example = yaml.safe_load((checkout / "docs/examples/azure_conv_2x.yaml").read_text())["workload"]
    row = next(w for w in bench.workloads(Path("/traces")) if w.key == "8")
    assert row.recommend and not row.aisimulate
    assert row.workload == {**example, "trace": "/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"}


def test_default_traces_only_beside_a_checkout(tmp_path):
    here = Path(bench.__file__).resolve()
    checkout = here.parents[2]
    expected = checkout.parent / "shared" / "traces"
    beside = (checkout / "pyproject.toml").is_file() and expected.is_dir()
    assert bench.default_traces() == (expected if beside else None)
    # An installed copy (site-packages/servesim/bench.py) has no checkout above it.
    site = tmp_path / "site-packages"
    shutil.copytree(Path(servesim.__file__).parent, site / "servesim",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(site)}
    probe = subprocess.run([sys.executable, "-c", "import servesim.bench as b; print(b.__file__, b.default_traces())"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert probe.stdout.split() == [str(site / "servesim" / "bench.py"), "None"], probe.stderr


def _console_script() -> str:
    script = Path(sys.executable).parent / "servesim"
    return str(script) if script.exists() else shutil.which("servesim")


def test_row_1a_from_an_installed_copy_outside_the_checkout(tmp_path):
    """The console script, with servesim imported from a copy laid out as pip installs it,
    run from a folder that is not the checkout: row 1a runs, a trace row is an error."""
    site = tmp_path / "site-packages"
    shutil.copytree(Path(servesim.__file__).parent, site / "servesim",
                    ignore=shutil.ignore_patterns("__pycache__"))
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run([_console_script(), "bench", "--only", "1a", "--repeat", "1"], capture_output=True,
                          text=True, cwd=work, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("| row | workload | timing | requests | output tokens |")
    assert len(lines) == 3 and lines[2].startswith("| 1a | closed loop c64, 1024/1024, 2,000 requests | fixed | ")
    # 2,000 requests of 1,024 output tokens each: 2,048,000 output tokens.
    assert "| 2,000 | 2,048,000 |" in lines[2]
    assert proc.stderr == ""
    proc = subprocess.run([_console_script(), "bench", "--only", "5"], capture_output=True, text=True, cwd=work,
                          env=env, timeout=60)
    line = one_error_line(proc)
    assert "bench row 5 needs the trace" in line and "--traces" in line


@pytest.mark.slow
def test_row_1a_from_a_built_wheel(tmp_path):
    """The wheel as `pip install` builds it, in a fresh virtualenv (dependencies borrowed from
    this one through a .pth file), its console script run from a folder outside the checkout."""
    checkout = Path(bench.__file__).resolve().parents[2]
    if not (checkout / "pyproject.toml").is_file():
        pytest.skip("needs the source checkout")
    export = tmp_path / "export"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=checkout,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        source = checkout / name
        if source.is_file():
            (export / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, export / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp_path / "dist", export],
                   check=True, timeout=600)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    ours = subprocess.run([sys.executable, "-c", "import numpy, os; print(os.path.dirname(os.path.dirname("
                           "numpy.__file__)))"], capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "borrowed_deps.pth").write_text(ours + "\n")   # a .pth line is a path; its own .pth files stay unread
    wheel = next((tmp_path / "dist").glob("servesim-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", wheel],
                   check=True, timeout=300)
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([venv / "bin" / "servesim", "bench", "--only", "1a", "--repeat", "1"],
                          capture_output=True, text=True, cwd=work, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "| 2,000 | 2,048,000 |" in proc.stdout.splitlines()[2]


def test_the_default_set_runs_what_it_can_and_names_the_rest(tmp_path, monkeypatch, capsys):
    measured = []

    def fake_measure(workload, timing, repeat):
        measured.append((workload.key, timing, repeat))
        return bench.Measurement(wall_s=2.0, loop_s=1.0, peak_rss_mb=56.0, requests=2000, output_tokens=2_048_000)

    monkeypatch.setattr(bench, "measure", fake_measure)
    monkeypatch.setattr(bench, "_byte_compile", lambda: None)
    assert bench.run_suite("", "fixed", 1, tmp_path) == 0
    out, err = capsys.readouterr()
    assert measured == [(k, "fixed", 1) for k in ROW_KEYS if k not in TRACE_ROWS]
    assert err == f"note: skipped rows 5, 5r, 5d, 6, 8: their traces are not in {tmp_path}; give --traces DIR to run them\n"
    rows = out.splitlines()[2:]
    assert [r.split(" | ")[0] for r in rows] == [f"| {k}" for k in ROW_KEYS if k not in TRACE_ROWS]
    # 2.0 s over 2,048,000 tokens: 0.977 µs/token whole; the loop's 1.0 s: 0.488.
    assert rows[0].endswith("| fixed | 2,000 | 2,048,000 | 2.00 | 0.977 | 0.488 | 56 |")


def test_rows_keep_their_simulated_deployment():
    """The vLLM rows' 60,000-block pool must fit the GPU (117 GiB of 8B KV cache: a B200), with the
    H100's token budget pinned so fixed timing simulates the passes it did on H100s."""
    from servesim.config import load_config

    for workload in bench.workloads():
        config = load_config(bench.config_for(workload, "fixed")).config
        scheduler = config.engine.roles()[next(iter(config.engine.roles()))].scheduler
        if workload.backend == "vllm":
            assert config.gpu == "b200"
            assert (scheduler.num_gpu_blocks, scheduler.max_num_batched_tokens, scheduler.max_num_seqs) == \
                (60000, 8192, 1024)
        else:
            assert config.gpu == "h100-sxm"
