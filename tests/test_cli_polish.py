"""The small things a user notices: plain flags in --help, one-line usage errors, dir(servesim),
"did you mean" for misspelt config keys, and sweep tables that stay readable at 80 columns."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from servesim.config import SimulationConfig, StrictModel, VllmSchedulerConfig, load_config
from servesim.config.hints import did_you_mean, keys_at
from servesim.errors import ServesimError


@pytest.fixture
def cli(capsys):
    """The command line in this process, as `servesim.cli.main` runs it: (status, stdout, stderr)."""
    from servesim.cli import app
    from servesim.cli_usage import run_app

    def call(*args):
        status = run_app(app, [str(a) for a in args])
        out, err = capsys.readouterr()
        return status, out, err

    return call


# --------------------------------------------------------------------------- --help and usage errors


@pytest.mark.parametrize("command, flags", [
    (["run"], ["--quiet", "--plots"]),
    (["sweep"], ["--resume", "--quiet"]),
    (["recommend"], ["--resume", "--quiet"]),
    (["bench"], []),
    ([], []),
])
def test_help_shows_flags_without_a_value_placeholder(cli, command, flags):
    status, out, err = cli(*command, "--help")
    assert status == 0 and err == ""
    assert "Usage:" in out and "<bool>" not in out
    for flag in flags + ["--help"]:
        assert flag in out
    if command in (["run"], ["sweep"]):
        assert "<int>" in out   # --seed, --top: options that take a value keep their placeholder


def test_a_flag_given_a_value_is_one_line(cli):
    status, out, err = cli("run", "--quiet=true")
    assert (status, out) == (2, "")
    assert err == "error: Option '--quiet' does not take a value\n"


@pytest.mark.parametrize("args, message", [
    (["run", "--bogus"], "error: No such option: --bogus"),
    (["sweep"], "error: Missing argument 'config'"),
    (["run", "--seed", "abc"], "error: Invalid value for '--seed': "),
    (["nope"], "error: No such command 'nope'"),
    (["recommend", "--model", "llama-3.1-8b"], "error: Missing option '--gpu'"),
])
def test_usage_errors_are_one_line_exit_2(cli, args, message):
    status, out, err = cli(*args)
    assert (status, out) == (2, "")
    assert err.startswith(message) and err.endswith(" --help)\n") and err.count("\n") == 1, err
    assert "╭" not in err and "Usage:" not in err


def test_no_arguments_shows_the_help(cli):
    status, out, err = cli()
    assert "Usage:" in out and "Commands" in out and "error" not in err
    assert status == 2   # as click's no_args_is_help does


def test_the_console_script_prints_usage_errors_in_one_line(tmp_path):
    script = Path(sys.executable).parent / "servesim"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "servesim"]
    proc = subprocess.run([*command, "run", "--bogus"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: No such option: --bogus") and proc.stderr.count("\n") == 1
    assert proc.stderr.endswith("run --help)\n")


def test_dir_lists_the_api_without_importing_it():
    code = ("import sys, servesim; print(dir(servesim)); "
            "print('servesim.run' in sys.modules, 'numpy' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.splitlines() == ["['Result', 'ServesimError', '__version__', 'simulate']", "False False"]


# --------------------------------------------------------------------------- did you mean


def _small(keys: list[tuple[str, object]]) -> dict:
    """A small config dict with `keys` (dotted) written into it, as a user's file would hold them."""
    from servesim.config import set_dotted

    data = {"workload": {"synthetic": {"num_requests": 3, "input_length": 8, "output_length": 2}}}
    for key, value in keys:
        set_dotted(data, key, value)
    return data


@pytest.mark.parametrize("overrides, hint", [
    ([("engine.workers.aggregated.scheduler.max_num_seq", 4)],
     "unknown key engine.workers.aggregated.scheduler.max_num_seq; did you mean max_num_seqs?"),
    ([("engine.backend", "sglang"), ("engine.workers.aggregated.scheduler", {"max_running_request": 8})],
     "unknown key engine.workers.aggregated.scheduler.max_running_request; did you mean max_running_requests?"),
    ([("engine.workers.aggregated.tpp", 2)], "unknown key engine.workers.aggregated.tpp; did you mean tp or pp?"),
    ([("slo.ttft", 100)], "unknown key slo.ttft; did you mean ttft_ms?"),
    ([("engine.timing", {"kind": "fixed", "pass_m": 5})], "unknown key engine.timing.pass_m; did you mean pass_ms?"),
    ([("modle", "llama-3.1-8b")], "unknown key modle; did you mean model?"),
    # A misspelt key inside a union member (a length range): named, not the "missing" key it left.
    ([("workload", {"synthetic": {"num_requests": 3, "input_length": {"min": 1, "mx": 3}, "output_length": 3}})],
     "unknown key workload.synthetic.input_length.mx; did you mean max?"),
    # Nothing close: the valid keys there, when they are few.
    ([("workload", {"synthetic": {"num_requests": 3, "input_length": {"min": 1, "zz": 3}, "output_length": 3}})],
     "unknown key workload.synthetic.input_length.zz; the keys there are max, min"),
])
def test_unknown_keys_suggest_the_valid_ones(overrides, hint):
    with pytest.raises(ServesimError) as err:
        load_config(_small(overrides))
    assert str(err.value) == f"config: {hint}"


def test_no_hint_when_nothing_is_close():
    with pytest.raises(ServesimError) as err:
        load_config(_small([("engine.workers.aggregated.scheduler.zzzzzz", 1)]))
    assert str(err.value) == "config: unknown key engine.workers.aggregated.scheduler.zzzzzz"


def test_keys_at_walks_the_schema():
    assert {"count", "tp", "scheduler"} <= set(keys_at(SimulationConfig, ("engine", "workers", "aggregated")))
    assert keys_at(SimulationConfig, ("engine", "timing", "fixed")) == ["kind", "pass_ms"]
    assert keys_at(SimulationConfig, ("no_such_key",)) == []
    assert did_you_mean(StrictModel, "VllmSchedulerConfig", ("max_num_seq",)) == "; did you mean max_num_seqs?"
    assert did_you_mean(StrictModel, "NoSuchModel", ("x",)) == ""
    assert "max_num_seqs" in VllmSchedulerConfig.model_fields


# --------------------------------------------------------------------------- tables at 80 columns


def _rows():
    from servesim.sweep.table import RankedRow

    return [RankedRow(310, "2× agg TP4", "max_num_seqs=64 max_num_batched_tokens=8192",
                      ("8", "1.043", "299", "27.8", "1,156", "47.5")),
            RankedRow(313, "1× P TP4 + 1× D TP4", "max_num_seqs=128 max_num_batched_tokens=16384 (+2 alike)",
                      ("8", "30.303", "12,299", "128.2", "453", "49.5"))]


def _render(width: int):
    from rich.console import Console

    from servesim.sweep.table import print_ranked

    buffer = io.StringIO()
    console = Console(width=width, file=buffer, color_system=None, highlight=False)
    narrow = print_ranked(console, _rows(), 90, "Best configurations meeting the SLOs", "latencies in ms")
    return narrow, buffer.getvalue()


def test_the_table_fits_80_columns_without_cutting_anything():
    narrow, text = _render(80)
    lines = text.splitlines()
    assert narrow and max(len(line) for line in lines) <= 80
    assert "…" not in text
    # Every figure whole; headers over two lines; the parameters listed under the table by trial.
    for figure in ("1.043", "30.303", "12,299", "1,156", "128.2", "49.5"):
        assert figure in text
    header = next(i for i, line in enumerate(lines) if "goodput" in line)
    assert "/GPU" in lines[header + 1] and "/user" in lines[header + 1] and "TTFT" in lines[header + 1]
    assert "  trial 310: max_num_seqs=64 max_num_batched_tokens=8192" in lines
    assert "  trial 313: max_num_seqs=128 max_num_batched_tokens=16384 (+2 alike)" in lines


def test_a_wide_terminal_keeps_one_column_per_field():
    narrow, text = _render(200)
    assert not narrow and "…" not in text
    header = next(line for line in text.splitlines() if "goodput/GPU" in line)
    for column in ("#", "trial", "fleet", "params", "GPUs", "tok/s/GPU", "tok/s/user", "p90 TTFT", "p90 TPOT"):
        assert column in header
    assert "max_num_seqs=64 max_num_batched_tokens=8192" in text


def test_a_real_sweep_report_at_80_columns(tmp_path):
    from rich.console import Console

    from servesim.sweep.executor import make_executor
    from servesim.sweep.report import build_report, print_report
    from servesim.sweep.runner import run_sweep
    from servesim.sweep.space import parse_space

    from tests.support.runs import sweep_base

    space = parse_space({"parameters": {"engine.workers.aggregated.scheduler.max_num_seqs": [2, 8]},
                         "slo": {"ttft_ms": 5000, "tpot_ms": 50, "percentile": 90}})
    executor = make_executor(1, None, False)
    try:
        result = run_sweep(sweep_base(40), space, tmp_path / "s", executor)
    finally:
        executor.close()
    try:
        buffer = io.StringIO()
        print_report(result, build_report(result), console=Console(width=80, file=buffer, color_system=None))
    finally:
        result.store.close()
    text = buffer.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80 and "…" not in text
    assert "max_num_seqs=8" in text and "goodput" in text
