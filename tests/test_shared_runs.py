"""Sweep trials that share a run (sweep/sharing.py, engine/vllm/shared_runs.py): a sweep whose
siblings are copied stores what the same sweep running every trial stores, but for wall times."""

from __future__ import annotations

import pytest

import servesim.sweep.sharing as sharing
from servesim.sweep.executor import InlineExecutor
from servesim.sweep.runner import run_sweep
from servesim.sweep.space import parse_space

from tests.test_sweep import stored


def base(prefix_length: int = 0) -> dict:
    """Llama-3.1-8B on one H100 with its pool from the memory profile: a lower max_num_seqs has more blocks."""
    return {
        "model": "llama-3.1-8b", "gpu": "h100-sxm",
        "engine": {"backend": "vllm", "timing": {"kind": "roofline"},
                   "workers": {"aggregated": {"scheduler": {"max_model_len": 2048}}}},
        "workload": {"synthetic": {"num_requests": 60, "input_length": {"min": 50, "max": 1500},
                                   "output_length": {"min": 5, "max": 120}, "prefix_length": prefix_length},
                     "client": {"mode": "poisson", "rate": 40.0}},
    }


def tight() -> dict:
    """Llama-3.1-70B on TP2 with long prompts: its pool refuses admissions (a larger one would not)."""
    config = base()
    config["model"] = "llama-3.1-70b"
    config["engine"]["workers"]["aggregated"] = {"tp": 2, "scheduler": {"max_model_len": 8192}}
    config["workload"]["synthetic"].update(input_length={"min": 3000, "max": 8000},
                                           output_length={"min": 100, "max": 400})
    config["workload"]["client"]["rate"] = 20.0
    return config


SPACE = {"parameters": {"engine.workers.*.count": [1, 2],
                        "engine.workers.*.scheduler.max_num_seqs": [2, 24, 64, 256]},
         "search": {"halving": {"min_requests": 20, "eta": 2}}, "slo": {"ttft_ms": 2000, "tpot_ms": 60}}


def counted(monkeypatch) -> dict:
    """Counts the siblings copied and those the witness sent to run."""
    counts = {"copied": 0, "run": 0}
    copied_outcome = sharing.copied_outcome

    def counting(*args):
        outcome = copied_outcome(*args)
        counts["copied" if outcome is not None else "run"] += 1
        return outcome
    monkeypatch.setattr(sharing, "copied_outcome", counting)
    return counts


def unshared(monkeypatch) -> None:
    monkeypatch.setattr(sharing, "copied_outcome", lambda *args: None)


@pytest.mark.parametrize("case", ["plain", "shared prefix", "tight pool"])
def test_copied_siblings_store_what_their_own_runs_store(tmp_path, monkeypatch, case):
    config = {"plain": base(), "shared prefix": base(64), "tight pool": tight()}[case]
    space = parse_space(SPACE)
    counts = counted(monkeypatch)
    shared = run_sweep(config, space, tmp_path / "shared", InlineExecutor())
    with monkeypatch.context() as m:
        unshared(m)
        alone = run_sweep(config, space, tmp_path / "alone", InlineExecutor())
    rows = stored(shared)
    assert rows == stored(alone)
    assert all(r["status"] == "ok" for r in rows.values())
    if case != "plain":   # every prompt's prefix hits, or the pool refused: the witness proves nothing
        assert counts["copied"] == 0 and counts["run"] > 0
    else:   # both paths: siblings copied, and siblings whose limit the run reached
        assert counts["copied"] > 0 and counts["run"] > 0
        blocks = {r["summary"]["num_gpu_blocks"]["aggregated"] for r in rows.values()}
        assert len(blocks) > 1   # the copies' pools are their own
    for result in (shared, alone):
        result.store.close()


def test_groups_are_led_by_the_highest_limit():
    from servesim.sweep.trials import Plan

    plan = Plan(base(), parse_space(SPACE))
    groups = sharing.share_groups(plan.trials(0, plan.candidates))
    seqs = [[t.config["engine"]["workers"]["aggregated"]["scheduler"]["max_num_seqs"] for t in g] for g in groups]
    assert seqs == [[256, 64, 24, 2], [256, 64, 24, 2]]
    assert [g[0].trial_id for g in groups] == [3, 7]


def test_other_backends_never_share():
    from servesim.engine.registry import BACKENDS

    config = {"engine": {"workers": {"aggregated": {"scheduler": {"max_num_seqs": 4}}}}}
    assert BACKENDS["vllm"].share_key(config) is not None
    assert all(b.share_key(config) is None for name, b in BACKENDS.items() if name != "vllm")


def test_a_pool_stores_what_one_process_running_every_trial_stores(tmp_path, monkeypatch):
    from servesim.sweep.executor import PoolExecutor

    space = parse_space(SPACE)
    pool = PoolExecutor(2)
    try:
        by_pool = run_sweep(base(), space, tmp_path / "pool", pool)
    finally:
        pool.close()
    unshared(monkeypatch)
    alone = run_sweep(base(), space, tmp_path / "alone", InlineExecutor())
    assert stored(by_pool) == stored(alone)
    assert len(by_pool.rows) == 14 and all(r["status"] == "ok" for r in by_pool.rows.values())
    for result in (by_pool, alone):
        result.store.close()
