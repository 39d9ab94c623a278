"""`servesim run` without typer (servesim/cli_run.py): the direct parse against typer's, and what a plain
run imports.

The direct parse must hand the run command exactly the parameters typer would, or leave the command
line to typer (None). The subprocess tests pin the start-up gain (docs/performance.md, "Start-up") so it
cannot silently regress: a plain run imports neither typer, importlib.metadata nor the engines' launch builders.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servesim.cli_run import RUN_DEFAULTS, parse_run_argv

SMALL = {"model": "llama-3.1-8b", "gpu": "h100-sxm",
         "engine": {"timing": {"kind": "fixed", "pass_ms": 10.0}},
         "workload": {"synthetic": {"num_requests": 3, "input_length": 64, "output_length": 8}}}


def typer_params(argv: list[str]) -> dict:
    """The parameters typer's run command receives for `argv` (`run ...`)."""
    import typer.main

    from servesim.cli_app import app

    command = typer.main.get_command(app).commands["run"]
    return command.make_context("run", list(argv[1:])).params


@pytest.mark.parametrize("argv", [
    ["run"],
    ["run", "c.yaml"],
    ["run", "c.yaml", "--out", "out/", "-q"],
    ["run", "-q", "c.yaml", "--out", "o"],
    ["run", "--quiet", "--json", "--plots", "--save-detailed", "c.yaml"],
    ["run", "c.yaml", "--seed", "007", "--trace", "t.jsonl", "--passes", "p.jsonl"],
    ["run", "--set", "seed=3", "c.yaml", "--set", "engine.timing={kind: fixed}", "--out", ""],
    ["run", "--format", "vllm", "--metric-percentiles", "50,99.9", "--out", "~/x"],
    ["run", "--set", "workload.client.mode=closed_loop"],
])
def test_the_direct_parse_gives_typers_parameters(argv):
    params = parse_run_argv(argv)
    assert params is not None, "this command line should run without typer"
    assert params == typer_params(argv)
    assert set(params) == set(RUN_DEFAULTS)


@pytest.mark.parametrize("argv", [
    [], ["sweep", "c.yaml"], ["--version"], ["run", "--help"], ["run", "-h"],
    ["run", "--out=o"], ["run", "-qV"], ["run", "--no-quiet"], ["run", "a.yaml", "b.yaml"],
    ["run", "--out"], ["run", "--out", "-q"], ["run", "--out", "a", "--out", "b"], ["run", "-q", "-q"],
    ["run", "--seed", "-1"], ["run", "--seed", "1_000"], ["run", "--seed", " 5"], ["run", "--seed", "x"],
    ["run", "--seed", "\u0663"], ["run", "--request-rate", "5"], ["run", "--goodput", "ttft:5"],
    ["run", "--num-prompts", "3"], ["run", "--", "c.yaml"], ["run", "-"], ["run", "--set"],
])
def test_other_command_lines_are_left_to_typer(argv):
    assert parse_run_argv(argv) is None


PROBE = """
import json, sys
sys.argv = ["servesim", *json.loads(sys.argv[1])]
from servesim.cli import main
try:
    main()
except SystemExit as exit_:
    status = exit_.code
print(json.dumps({"status": status, "modules": sorted(m for m in sys.modules if m.split(".")[0] in
                  ("typer", "click", "importlib", "servesim"))}))
"""


def _probe(args: list[str], cwd: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args)], capture_output=True, text=True,
                          cwd=cwd, timeout=120)
    return json.loads(proc.stdout.splitlines()[-1]) | {"stderr": proc.stderr}


def test_a_plain_run_imports_no_typer(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps(SMALL))
    seen = _probe(["run", str(config), "--out", str(tmp_path / "out"), "-q"], tmp_path)
    assert seen["status"] == 0, seen["stderr"]
    assert (tmp_path / "out" / "requests.csv").is_file()
    assert not [m for m in seen["modules"] if m.split(".")[0] in ("typer", "click")]
    assert "servesim.cli_app" not in seen["modules"]
    assert "importlib.metadata" not in seen["modules"]   # pydantic's plugin loader stood in for (cli.py)
    assert not [m for m in seen["modules"] if m.endswith(".launch")]   # `servesim deploy`'s, on call


HAND_OVER = """
import os, sys
os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
from servesim.cli import _skip_pydantic_plugin_loader
_skip_pydantic_plugin_loader()
from pydantic.plugin._loader import get_plugins
assert get_plugins() == () and "importlib.metadata" not in sys.modules
os.environ["PYDANTIC_DISABLE_PLUGINS"] = "some_plugin"
get_plugins()
assert hasattr(sys.modules["pydantic.plugin._loader"], "PYDANTIC_ENTRY_POINT_GROUP")   # the real loader
print("ok")
"""


def test_the_plugin_loader_stand_in_hands_over_when_plugins_are_turned_on():
    proc = subprocess.run([sys.executable, "-c", HAND_OVER], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "ok", proc.stderr


def test_a_run_typer_parses_still_runs(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps(SMALL))
    seen = _probe(["run", str(config), f"--out={tmp_path / 'out'}", "-q", "--num-prompts", "2"], tmp_path)
    assert seen["status"] == 0, seen["stderr"]
    assert "typer" in seen["modules"]
    assert len((tmp_path / "out" / "requests.csv").read_text().splitlines()) == 3   # a header and 2 requests


@pytest.mark.parametrize("args", [["/no/such.yaml"], ["--seed", "5", "--set", "engine.backend=tgi"],
                                  ["--plots"], ["--format", "csv"]])
def test_errors_read_the_same_either_way(tmp_path, args):
    direct = _probe(["run", *args, "-q"], tmp_path)
    through_typer = _probe(["run", *args, "--metric-percentiles=50,90,95,99", "-q"],
                           tmp_path)
    assert "typer" not in direct["modules"] and "typer" in through_typer["modules"]
    assert direct["status"] == through_typer["status"] == 2
    assert direct["stderr"] == through_typer["stderr"] and direct["stderr"].startswith("error: ")


def test_version_without_typer_reads_as_typers(tmp_path, capsys):
    from servesim.cli_app import app
    from servesim.cli_usage import run_app

    for flag in ("--version", "-V"):
        seen = _probe([flag], tmp_path)
        assert seen["status"] == 0 and "typer" not in seen["modules"]
        capsys.readouterr()
        assert run_app(app, [flag]) == 0
        assert capsys.readouterr().out == subprocess.run(
            [sys.executable, "-m", "servesim", flag], capture_output=True, text=True, timeout=60).stdout
