"""`servesim serve` under 240 concurrent streams (the slow suite): the server's records equal
the offline `servesim run` replay of the same arrival times exactly, and each request's TTFT
and TPOT as the client measured them exceed the replay's by no more than the server's lag plus
the HTTP time, both in simulated time (docs/serve.md, "Pacing")."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys

import httpx
import numpy as np
import pytest

import servesim
from servesim.serve.prompts import PromptCounter
from servesim.serve.settings import ServeConfig
from tests.support.serve_load import Planned, drive
from tests.support.serve_server import wait_for
from tests.test_serve import _free_port, _healthy

pytestmark = pytest.mark.slow

SPEED = 0.05            # slow motion: the client and the server share the machine's cores
STREAMS = 240
SPAN_NS = 2_000_000_000     # arrivals over 2 simulated seconds
OUTPUTS = 64
BOUND_NS = 50_000_000       # 50 simulated ms: serve.lag_warn_ms, the bound the server warns past
CONFIG = {"model": "llama-3.1-8b", "gpu": "h100-sxm",
          "workload": {"synthetic": {"num_requests": 1, "input_length": 10, "output_length": 10}}}


def _plan() -> list[Planned]:
    # A 512-token prefix every prompt shares (the prefix cache's hits), then 256 tokens of its own.
    rng = np.random.default_rng(0)
    shared = list(range(512))
    return [Planned(i * SPAN_NS // STREAMS, shared + rng.integers(1000, 30000, 256).tolist(), OUTPUTS)
            for i in range(STREAMS)]


def _serve(tmp_path, plan):
    (tmp_path / "c.yaml").write_text(json.dumps(CONFIG))
    port = _free_port()
    out = tmp_path / "served"
    proc = subprocess.Popen([sys.executable, "-m", "servesim", "serve", str(tmp_path / "c.yaml"), "--port", str(port),
                             "--speed", str(SPEED), "--out", str(out)], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _healthy(url), "the server's start", 60)
        seen = drive(url, plan, SPEED)
        metrics = httpx.get(f"{url}/metrics").text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
    finally:
        proc.kill()
    lag_max = next(float(line.split()[1]) for line in metrics.splitlines()
                   if line.startswith("servesim:lag_max_seconds "))
    return seen, out, lag_max


def _replay(tmp_path, rows, plan) -> str:
    """The offline run of the served arrival times and prompts (their block ids as the server made them)."""
    counter = PromptCounter(ServeConfig(), tmp_path, 512)
    prompts = {f"cmpl-{i}": p.prompt for i, p in enumerate(plan)}
    with open(tmp_path / "served.jsonl", "w") as fh:
        for row in rows:
            fh.write(json.dumps({"timestamp": float(row["arrival_ms"]), "input_length": int(row["input_length"]),
                                 "output_length": int(row["output_length"]),
                                 "hash_ids": list(counter.hash_ids(prompts[row["trace_request_id"]]))}) + "\n")
    result = servesim.simulate(CONFIG, trace=tmp_path / "served.jsonl")
    text = io.StringIO()
    result.requests.write_csv(text)
    return text.getvalue()


def _without_ids(text: str) -> list[list[str]]:
    rows = list(csv.reader(io.StringIO(text)))
    column = rows[0].index("trace_request_id")
    return [r[:column] + r[column + 1:] for r in rows]


def test_streams_match_the_offline_replay_within_lag_and_http_time(tmp_path):
    plan = _plan()
    seen, out, lag_max = _serve(tmp_path, plan)
    served = (out / "requests.csv").read_text()
    rows = list(csv.DictReader(io.StringIO(served)))
    assert len(rows) == STREAMS and {r["output_length"] for r in rows} == {str(OUTPUTS)}
    assert all(s.usage == {"prompt_tokens": 768, "completion_tokens": OUTPUTS, "total_tokens": 768 + OUTPUTS}
               for s in seen)
    assert sum(int(r["cached_tokens"]) for r in rows) > 0       # the shared prefix was hit
    assert _without_ids(_replay(tmp_path, rows, plan)) == _without_ids(served)

    assert lag_max * 1e9 <= BOUND_NS
    by_id = {r["trace_request_id"]: r for r in rows}
    ttft_excess, tpot_excess = [], []
    for s in seen:
        row = by_id[s.response_id]
        ttft_excess.append((s.first_s - s.sent_s) * SPEED * 1e9 - float(row["ttft_ms"]) * 1e6)
        tpot_client = (s.last_s - s.first_s) / (OUTPUTS - 1) * SPEED * 1e9   # a chunk may hold 2+ tokens
        tpot_excess.append(tpot_client - float(row["tpot_ms"]) * 1e6)
    # The client's clock starts before the server stamps the arrival and stops after the hand-over:
    # its TTFT is the record's plus the lag plus the HTTP time (x speed), never less.
    report = {"streams": STREAMS, "speed": SPEED, "lag_max_ms": lag_max * 1e3,
              "ttft_excess_ms": [round(float(np.percentile(ttft_excess, q)) / 1e6, 3) for q in (50, 90, 100)],
              "tpot_excess_ms": [round(float(np.percentile(tpot_excess, q)) / 1e6, 4) for q in (0, 50, 90, 100)]}
    print("serve load:", json.dumps(report))
    # The server's own part is exact (the records and the lag, above). The client's excess is its HTTP
    # time in wall seconds × speed, so a client process stalled by other load on the machine shows up
    # here: bound the bulk of it (p90), not its single worst stream.
    assert min(ttft_excess) >= 0 and np.percentile(ttft_excess, 90) <= BOUND_NS
    assert np.percentile(np.abs(tpot_excess), 90) <= BOUND_NS / (OUTPUTS - 1)
