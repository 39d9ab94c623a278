"""The command line as a user runs it: `servesim ...` in a subprocess."""

from __future__ import annotations

import subprocess
import sys


def servesim_cli(*args, cwd=None, env=None, timeout: float | None = 300) -> subprocess.CompletedProcess:
    """`servesim ARGS...` as this interpreter's `python -m servesim`, its stdout and stderr captured as text."""
    return subprocess.run([sys.executable, "-m", "servesim", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)
