"""One home per engine: nothing outside the backend packages and the registry names an engine.

Engine knowledge lives in src/servesim/engine/<backend>/ and is reached through
engine/registry.py (docs/modeling/backends.md). Code elsewhere that compares with a
backend's name, keys a dict by backend names, lists them, or asks `isinstance` of a
scheduler config or scheduler class is a branch on the backend in the wrong place: this
test greps for it, outside comments, and names the file and line.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import servesim
from servesim.engine.registry import BACKENDS

SRC = Path(servesim.__file__).parent
# Where engine knowledge may live: each backend's package, and the registry that lists them.
ALLOWED = [f"engine/{name}/" for name in BACKENDS] + ["engine/registry.py"]

_NAME = "|".join(re.escape(name) for name in BACKENDS)
_QUOTED = rf"""['"](?:{_NAME})['"]"""
PATTERNS = {
    "a comparison with a backend name": re.compile(rf"(?:==|!=)\s*{_QUOTED}|{_QUOTED}\s*(?:==|!=)"),
    "a membership test in backend names": re.compile(rf"\bin\s*[(\[{{][^)\]}}]*{_QUOTED}"),
    "a dict keyed by backend name": re.compile(rf"{_QUOTED}\s*:\s*\S"),
    "a list of backend names": re.compile(rf"{_QUOTED}\s*,\s*{_QUOTED}"),
    "a Literal of backend names": re.compile(rf"Literal\[[^\]]*{_QUOTED}"),
    "a match on a backend name": re.compile(rf"\bcase\s+{_QUOTED}"),
    "an isinstance on a scheduler config or scheduler": re.compile(
        r"isinstance\([^)]*(?:SchedulerConfig|(?:Vllm|Sglang|Trtllm|FastVllm|FastSglang|FastTrtllm)Scheduler\b)"),
}


def _code_lines(text: str) -> list[str]:
    """The file's lines with comments blanked (a `#` inside a string stays)."""
    lines = text.splitlines()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            row, col = token.start
            lines[row - 1] = lines[row - 1][:col]
    return lines


def violations(root: Path = SRC) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if any(relative.startswith(prefix) for prefix in ALLOWED):
            continue
        for number, line in enumerate(_code_lines(path.read_text(encoding="utf-8")), 1):
            for what, pattern in PATTERNS.items():
                if pattern.search(line):
                    found.append(f"src/servesim/{relative}:{number}: {what}: {line.strip()}")
                    break
    return found


def test_no_backend_branches_outside_the_backend_packages():
    found = violations()
    assert not found, ("engine knowledge outside engine/<backend>/ and engine/registry.py "
                       "(ask the registry's Backend instead):\n" + "\n".join(found))


def test_the_grep_finds_each_kind_of_branch(tmp_path):
    (tmp_path / "engine" / "vllm").mkdir(parents=True)
    (tmp_path / "engine" / "vllm" / "ok.py").write_text('if backend == "vllm":\n    pass\n')
    (tmp_path / "bad.py").write_text(
        'if backend == "vllm":\n'
        '    pass\n'
        'x = "sglang" != name\n'
        'if name in ("vllm", "other"):\n'
        '    pass\n'
        'LABELS = {"vllm": "vLLM"}\n'
        'NAMES = ("sglang", "trtllm")\n'
        'Kind = Literal["vllm"]\n'
        'if isinstance(sched, TrtllmSchedulerConfig):\n'
        '    pass\n'
        'y = 1  # a comment may say backend == "vllm"\n'
        'z = f"{backend}: x"\n'
        'match backend:\n'
        '    case "sglang":\n'
        '        pass\n'
    )
    found = violations(tmp_path)
    assert [line.split(":")[1] for line in found] == ["1", "3", "4", "6", "7", "8", "9", "14"]
    assert all(line.startswith("src/servesim/bad.py:") for line in found)


def test_fast_forward_is_declared_not_probed():
    # engine/events.py: a scheduler that fast-forwards says so with `fast_forwards`, and has
    # every FastForward method; the worker reads the flag, never hasattr.
    from servesim.engine.events import FastForward

    methods = [name for name in vars(FastForward) if not name.startswith("_")
               and callable(getattr(FastForward, name))]
    assert set(methods) == {"may_run", "quiet_steps", "run_segments", "extend", "is_final"}
    for backend in BACKENDS.values():
        for reference in (False, True):
            cls = type(backend.make_scheduler(_resolved_scheduler(backend.name), _NoCache(), reference))
            assert cls.fast_forwards is not reference, cls
            if cls.fast_forwards:
                # is_final is asked only of a scheduler that commits its follow-up late (vLLM's).
                needed = [m for m in methods if m != "is_final" or cls.commits_follow_late]
                assert all(callable(getattr(cls, m, None)) for m in needed), cls
    worker = (SRC / "engine" / "worker.py").read_text()
    assert "hasattr(" not in "\n".join(_code_lines(worker))


class _NoCache:
    block_size = 16


def _resolved_scheduler(backend: str):
    from servesim.config import load_config
    from servesim.config.resolution import resolve

    return resolve(load_config(None, [("engine.backend", backend)])).roles["aggregated"].scheduler
