"""How much one core of `servesim serve` sustains (docs/serve.md, "Capacity").

For each stream count N: a server (a subprocess, at --speed 1) with fixed 20 ms passes serves N
streaming completions of 128 output tokens that all arrive at once, so it must deliver N x 50
tokens per second; an asyncio client (tests/support/serve_load.py) reads them. Printed per N:
the tokens delivered, the server's CPU seconds (from /proc), tokens per server CPU second, and
its lag (the latest a token reached its client after its simulated time; /metrics).

    python benchmarks/serve_capacity.py [N ...]      # default 50 100 200 400
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import httpx  # noqa: E402

from tests.support.serve_load import Planned, drive  # noqa: E402

OUTPUTS = 128
CONFIG = {"model": "llama-3.1-8b", "gpu": "h100-sxm",
          "engine": {"timing": {"kind": "fixed", "pass_ms": 20.0},
                     "workers": {"aggregated": {"scheduler": {"max_num_seqs": 1024}}}},
          "workload": {"synthetic": {"num_requests": 1, "input_length": 10, "output_length": 10}}}


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(streams: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp, socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        config = Path(tmp) / "c.yaml"
        config.write_text(json.dumps(CONFIG))
        proc = subprocess.Popen([sys.executable, "-m", "servesim", "serve", str(config), "--port", str(port)],
                                stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(600):
                try:
                    httpx.get(f"{url}/health", timeout=1)
                    break
                except httpx.HTTPError:
                    time.sleep(0.1)
            cpu0, wall0 = _cpu_s(proc.pid), time.perf_counter()
            seen = drive(url, [Planned(0, list(range(64)), OUTPUTS) for _ in range(streams)], 1.0)
            cpu, wall = _cpu_s(proc.pid) - cpu0, time.perf_counter() - wall0
            metrics = httpx.get(f"{url}/metrics").text
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    lag = next(float(x.split()[1]) for x in metrics.splitlines() if x.startswith("servesim:lag_max_seconds "))
    tokens = sum(s.usage["completion_tokens"] for s in seen)
    return {"streams": streams, "tokens": tokens, "wall_s": round(wall, 2), "server_cpu_s": round(cpu, 2),
            "tokens_per_cpu_s": round(tokens / cpu), "demanded_tokens_per_s": streams * 50,
            "lag_max_ms": round(lag * 1e3, 1)}


if __name__ == "__main__":
    for n in [int(a) for a in sys.argv[1:]] or [50, 100, 200, 400]:
        print(json.dumps(measure(n)), flush=True)
