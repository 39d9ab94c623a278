"""Sweeps end to end: the CLI's files, a SIGKILLed sweep resumed, pool and Ray alike, recommend."""

from __future__ import annotations

import csv
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
import yaml

import servesim
from servesim.sweep.executor import PoolExecutor, slim_summary
from servesim.sweep.runner import run_sweep
from servesim.sweep.space import parse_space

from tests.support.cli import servesim_cli
from tests.support.runs import sweep_base

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
BASE = sweep_base(200)
SPACE = {
    "parameters": {
        "engine.workers": [{"aggregated": {"count": 1}}, {"aggregated": {"count": 2}},
                           {"prefill": {"count": 1}, "decode": {"count": 1}}],
        "engine.workers.*.scheduler": [{"num_gpu_blocks": 400, "max_model_len": 512, "max_num_batched_tokens": 512}],
        "engine.workers.*.scheduler.max_num_seqs": [1, 4, 16],
    },
    "constraints": {"max_gpus": 2},
    "slo": {"ttft_ms": 300, "tpot_ms": 20, "percentile": 90},
}


def write(path, data):
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def comparable(db_path) -> dict:
    """Each stored trial, without what depends on the wall clock or the invocation."""
    with sqlite3.connect(db_path) as db:
        cursor = db.execute("SELECT * FROM trials ORDER BY trial_id")
        names = [d[0] for d in cursor.description]
        rows = [dict(zip(names, r)) for r in cursor.fetchall()]
    out = {}
    for row in rows:
        summary = json.loads(row["summary_json"]) if row["summary_json"] else None
        if summary:
            summary.pop("wall_time_ms")
        out[row["trial_id"]] = {**{k: v for k, v in row.items()
                                   if k not in ("wall_time_s", "session", "wall_time_ms", "summary_json")},
                                "summary": summary}
    return out


def test_cli_sweep_writes_table_csv_pareto_and_a_best_yaml_that_reruns(tmp_path):
    base = write(tmp_path / "base.yaml", BASE)
    space = write(tmp_path / "space.yaml", SPACE)
    out = tmp_path / "out"
    proc = servesim_cli("sweep", base, "--space", space, "--out", out, "--workers", 1)
    assert proc.returncode == 0, proc.stderr
    assert "Best configurations meeting the SLOs" in proc.stdout and "Recommended: trial" in proc.stdout
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith("trials.sqlite-")) == \
        ["best.yaml", "pareto.png", "trials.csv", "trials.sqlite"]
    assert (out / "pareto.png").read_bytes()[:8] == PNG_MAGIC
    with open(out / "trials.csv") as fh:
        rows = list(csv.DictReader(fh))
    # 3 layouts × 3 limits, the 2-GPU P/D split kept (2 GPUs), nothing over budget.
    assert [int(r["trial_id"]) for r in rows] == list(range(9))
    assert {r["status"] for r in rows} == {"ok"}
    assert rows[6]["fleet"] == "1× P TP1 + 1× D TP1" and rows[0]["params"] == "max_num_seqs=1"
    for key in ("p90_ttft_ms", "request_goodput_req_s", "gpus", "config_hash", "overrides", "error"):
        assert key in rows[0]
    # best.yaml is the recommended trial's config: running it gives the stored summary again.
    best_id = int(proc.stdout.split("Recommended: trial ", 1)[1].split(",", 1)[0])
    rerun = servesim.simulate(str(out / "best.yaml"))
    with sqlite3.connect(out / "trials.sqlite") as db:
        stored = json.loads(db.execute("SELECT summary_json FROM trials WHERE trial_id = ?", (best_id,)).fetchone()[0])
    expected = {k: v for k, v in slim_summary(rerun.summary).items() if k not in ("wall_time_ms",)}
    assert {k: v for k, v in stored.items() if k != "wall_time_ms"} == expected
    assert rerun.summary["p90_ttft_ms"] <= 300 and rerun.summary["p90_tpot_ms"] <= 20

    again = servesim_cli("sweep", base, "--space", space, "--out", out, "--workers", 1, "-q")
    assert again.returncode == 2 and "pass --resume" in again.stderr and "Traceback" not in again.stderr
    resumed = servesim_cli("sweep", base, "--space", space, "--out", out, "--workers", 1, "--resume")
    assert resumed.returncode == 0 and "0 run now, 9 found done" in resumed.stdout


def test_cli_sweep_bad_space_is_one_sentence(tmp_path):
    base = write(tmp_path / "base.yaml", BASE)
    space = write(tmp_path / "space.yaml", {"parameters": {"engine.workers.*.tp": [1]}, "objective": "fast"})
    proc = servesim_cli("sweep", base, "--space", space)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {space}: objective") and proc.stderr.count("\n") == 1
    missing = servesim_cli("sweep", base, "--space", tmp_path / "nope.yaml")
    assert missing.returncode == 2 and "does not exist" in missing.stderr


KILL_SPACE = {
    "parameters": {"engine.workers.*.count": [1, 2],
                   "engine.workers.*.scheduler.max_num_seqs": [1, 4, 8, 16]},
    "search": {"halving": {"min_requests": 500, "eta": 2}},
    "slo": {"ttft_ms": 300, "tpot_ms": 20},
}


def test_sigkilled_sweep_resumes_to_exactly_the_uninterrupted_trials(tmp_path):
    base = write(tmp_path / "base.yaml", {**BASE, "workload": {**BASE["workload"], "synthetic": {
        **BASE["workload"]["synthetic"], "num_requests": 1000}}})
    space = write(tmp_path / "space.yaml", KILL_SPACE)
    killed = tmp_path / "killed"
    command = [sys.executable, "-m", "servesim", "sweep", str(base), "--space", str(space), "--out", str(killed),
               "--workers", "2", "-q"]
    proc = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    db_path = killed / "trials.sqlite"
    done_at_kill: dict = {}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if db_path.exists():
            try:
                with sqlite3.connect(db_path) as db:
                    done_at_kill = dict(db.execute("SELECT trial_id, wall_time_s FROM trials"))
            except sqlite3.OperationalError:
                done_at_kill = {}
            if len(done_at_kill) >= 3:
                break
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)   # the coordinator and its pool, as a lost terminal would
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()
    with sqlite3.connect(db_path) as db:
        done_at_kill = dict(db.execute("SELECT trial_id, wall_time_s FROM trials"))
    total = 8 + 4   # 8 candidates on 500 requests, the best 4 on all 1,000
    assert 3 <= len(done_at_kill) < total

    resumed = servesim_cli(*command[3:-1], "--resume", "-q")
    assert resumed.returncode == 0, resumed.stderr
    whole = tmp_path / "whole"
    uninterrupted = servesim_cli("sweep", base, "--space", space, "--out", whole, "--workers", "2", "-q")
    assert uninterrupted.returncode == 0, uninterrupted.stderr

    assert comparable(db_path) == comparable(whole / "trials.sqlite")
    with sqlite3.connect(db_path) as db:
        after = {tid: (wall, session) for tid, wall, session in db.execute(
            "SELECT trial_id, wall_time_s, session FROM trials")}
    assert len(after) == total
    # Trials done before the kill did not run again (same wall time, first session); the rest ran on resume.
    assert all(after[tid] == (wall, 1) for tid, wall in done_at_kill.items())
    assert all(session == 2 for tid, (_, session) in after.items() if tid not in done_at_kill)


def test_pool_and_ray_give_identical_trials(tmp_path):
    ray = pytest.importorskip("ray")
    from servesim.sweep.executor import RayExecutor

    space = parse_space({**SPACE, "parameters": {**SPACE["parameters"],
                                                 "engine.workers.*.scheduler.max_num_seqs": [2, 16]}})
    pool = PoolExecutor(2)
    try:
        by_pool = run_sweep(BASE, space, tmp_path / "pool", pool)
    finally:
        pool.close()
    executor = RayExecutor(None, num_cpus=2)
    try:
        by_ray = run_sweep(BASE, space, tmp_path / "ray", executor)
    finally:
        executor.close()
    assert not ray.is_initialized()
    assert len(by_pool.rows) == 6 and all(r["status"] == "ok" for r in by_pool.rows.values())
    assert comparable(by_pool.store.path) == comparable(by_ray.store.path)
    for result in (by_pool, by_ray):
        result.store.close()


def test_recommend_meets_its_slos_in_its_own_simulation(tmp_path):
    out = tmp_path / "rec"
    proc = servesim_cli("recommend", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", 2,
                        "--workload", "requests=80,input=200-2000,output=20-200,rate=8",
                        "--slo", "ttft_ms=500,tpot_ms=25", "--out", out, "--workers", 1)
    assert proc.returncode == 0, proc.stderr
    assert "max_model_len 4,096 (the workload's longest request is" in proc.stdout
    assert "Recommended: trial" in proc.stdout
    space = yaml.safe_load((out / "space.yaml").read_text())
    layouts = space["parameters"]["engine.workers"]
    assert {"aggregated": {"tp": 1, "scheduler": {"max_model_len": 4096}, "count": 2}} in layouts
    assert any("prefill" in layout for layout in layouts)
    assert space["constraints"] == {"max_gpus": 2, "gpus_per_node": 8}
    assert "&id" not in (out / "best.yaml").read_text()   # plain YAML, no anchors
    best = yaml.safe_load((out / "best.yaml").read_text())
    assert best["engine"]["timing"] == {"kind": "roofline"}
    result = servesim.simulate(str(out / "best.yaml"))
    assert result.summary["gpus"] <= 2 and result.summary["failed_requests"] == 0
    assert result.summary["p90_ttft_ms"] <= 500 and result.summary["p90_tpot_ms"] <= 25
    # The files it wrote rerun as a plain sweep.
    rerun = servesim_cli("sweep", out / "base.yaml", "--space", out / "space.yaml", "--out", tmp_path / "again",
                         "--workers", 1, "-q")
    assert rerun.returncode == 0, rerun.stderr
    assert comparable(out / "trials.sqlite") == comparable(tmp_path / "again" / "trials.sqlite")


@pytest.mark.parametrize("args, message", [
    (["--slo", "ttft=5"], "--slo: unknown key ttft"),
    (["--workload", "requests=10,input=5"], "give output= too"),
    (["--gpu", "h900"], "h900"),
])
def test_recommend_bad_input_is_one_sentence(args, message):
    options = {"--model": "llama-3.1-8b", "--gpu": "h100-sxm", "--gpus": "1",
               "--workload": "requests=10,input=5,output=5,rate=1", "--slo": "ttft_ms=100"}
    options.update(dict(zip(args[::2], args[1::2])))
    proc = servesim_cli("recommend", *[x for kv in options.items() for x in kv])
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
