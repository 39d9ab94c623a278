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
        assert counts["copied"] == 0
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


# --- Cases that pin single checks of the rule: each one's stored rows differ with that check gone. ---


def sweep_both(config: dict, limits: list[int], out, monkeypatch) -> tuple[dict, dict, dict]:
    """One grid sweep over `limits` as max_num_seqs, with sharing and without: (rows, rows, counts)."""
    space = parse_space({"parameters": {"engine.workers.*.scheduler.max_num_seqs": limits}})
    with monkeypatch.context() as m:
        counts = counted(m)
        shared = run_sweep(config, space, out / "shared", InlineExecutor())
    with monkeypatch.context() as m:
        unshared(m)
        alone = run_sweep(config, space, out / "alone", InlineExecutor())
    rows = stored(shared), stored(alone)
    for result in (shared, alone):
        result.store.close()
    return rows[0], rows[1], counts


def test_an_eviction_proves_nothing(tmp_path, monkeypatch):
    """Pins `kv.evicted` in run_witness. One request at a time cycles through 9 prompts of 48 keyed
    blocks (49 with its output). At max_num_seqs 256 the 8B's pool at 0.23 utilisation has fewer
    blocks than the 8 prompts between two turns of one take, so each prompt is evicted whole before
    it comes round again: no lookup hits, nothing is refused, and only the evictions stop the witness.
    At max_num_seqs 8 the pool has more blocks than that; the head of each prompt's chain outlives the
    others (a request's deepest blocks are evicted first) and its lookups hit: another run."""
    import json

    trace = tmp_path / "cycling.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 0.0, "input_length": 768, "output_length": 2,
                                         "hash_ids": [1000 + (i % 9) * 100 + j for j in range(12)]}) + "\n"
                             for i in range(60)))
    config = base()
    config["engine"]["workers"]["aggregated"]["gpu_memory_utilization"] = 0.23
    config["workload"] = {"trace": str(trace), "format": "servesim-jsonl", "trace_block_size": 64,
                          "client": {"mode": "closed_loop", "concurrency": 1}}
    shared, alone, counts = sweep_both(config, [256, 8], tmp_path, monkeypatch)
    assert shared == alone
    assert all(r["status"] == "ok" for r in shared.values())
    assert counts["copied"] == 0
    blocks = [r["summary"]["num_gpu_blocks"]["aggregated"] for r in shared.values()]
    assert blocks[0] < 8 * 49 < blocks[1]


def test_an_moe_model_reads_the_capture_size(tmp_path, monkeypatch):
    """Pins the capture-size check in run_covers (equal, or a dense model). Mixtral on TP2 at a low
    rate never has more than a few requests running, so at max_num_seqs 512 the run proves the limit
    never bound at 128 or 96; but the default capture size follows max_num_seqs and a MoE model's
    eager prefill time (roofline `_eager_prefill`) reads it, so those runs' step times differ."""
    config = base()
    config["model"] = "mixtral-8x7b"
    config["engine"]["workers"]["aggregated"]["tp"] = 2
    config["workload"]["synthetic"].update(num_requests=40, input_length={"min": 300, "max": 500})
    config["workload"]["client"]["rate"] = 2.0
    shared, alone, counts = sweep_both(config, [512, 128, 96], tmp_path, monkeypatch)
    assert shared == alone
    assert all(r["status"] == "ok" for r in shared.values())
    assert counts["copied"] == 0 and counts["run"] > 0   # the limits alone would be covered


def near_full(sched: dict, role: dict, requests: int, inputs: int, outputs: int, rate: float,
              seed: int, pd: str | None = None) -> dict:
    """An 8B config with a pool near its limit: `role` sets gpu_memory_utilization just above what
    the weights take; `pd` (where the first token comes from) splits it into a prefill/decode pair."""
    import copy

    config = base()
    config["seed"] = seed
    role = {**role, "scheduler": {"max_model_len": 2048, **sched}}
    config["engine"]["workers"] = {"aggregated": role}
    config["workload"]["synthetic"] = {"num_requests": requests, "input_length": {"min": 20, "max": inputs},
                                       "output_length": {"min": 5, "max": outputs}}
    config["workload"]["client"]["rate"] = rate
    if pd is not None:
        config["engine"]["workers"] = {"prefill": role, "decode": copy.deepcopy(role)}
        config["engine"]["kv_transfer"] = {"bandwidth_gb_s": 50.0, "latency_ms": 0.5, "first_token_from": pd}
    return config


def random_case(seed: int) -> tuple[dict, list[int]]:
    """A near-full sweep drawn from `seed`: sync or async scheduling, prefix caching on or off, a
    token budget, a watermark, EAGLE, PP2, two workers or a prefill/decode pair; and its limits,
    a high max_num_seqs with 4 lower ones."""
    import random

    rng = random.Random(seed)
    sched = {"async_scheduling": rng.random() < 0.6, "enable_prefix_caching": rng.random() < 0.7,
             "max_num_batched_tokens": rng.choice([512, 2048, 8192])}
    if rng.random() < 0.3:
        sched["watermark"] = rng.choice([0.0, 0.05, 0.2])
    role: dict = {"gpu_memory_utilization": rng.choice([0.226, 0.228, 0.23, 0.235, 0.24, 0.26])}
    kind = rng.random()
    if kind < 0.15:
        role["speculative"] = {"method": "eagle", "num_speculative_tokens": 2, "acceptance_rate": 0.6}
    elif kind < 0.25:
        role["pp"] = 2
        sched["async_scheduling"] = False
    elif kind < 0.4:
        role["count"] = 2
    requests = rng.choice([60, 150, 300])
    inputs, outputs = rng.choice([200, 1000, 1900]), rng.choice([50, 300, 1000])
    rate = rng.choice([5.0, 20.0, 80.0])
    pd = rng.choice(["prefill", "decode"]) if rng.random() < 0.25 else None
    limits = [rng.choice([256, 128, 96, 64]), *sorted(rng.sample([48, 40, 32, 24, 16, 12, 8, 4], 4), reverse=True)]
    return near_full(sched, role, requests, inputs, outputs, rate, seed, pd), limits


# Seeds whose sweeps are quick; among them 3, 7, 9, 42, 71 and 77 copy wrongly without the failed
# admission check's flag (KvCache.admit's `refused`), 63 and 82 without the async decode run's cut
# flag (group_runs.py), and 16 of the 30 copy some sibling.
SEEDS = [1, 3, 7, 9, 10, 13, 17, 25, 29, 33, 36, 38, 40, 42, 44, 48, 49, 52, 60, 61, 63, 71, 74, 76, 77,
         78, 79, 81, 82, 83]

# Cases of a review's wider random search (its r4, r58, r18): a sync decode run cut short by free
# blocks, which no seed of random_case below 120 reaches (r4, r58), and two workers whose
# admissions are refused (r18).
SYNC = {"async_scheduling": False, "max_num_batched_tokens": 8192}
PINNED = {
    "r4 sync cut": (near_full({**SYNC, "enable_prefix_caching": False, "watermark": 0.0},
                              {"gpu_memory_utilization": 0.24}, 60, 200, 1000, 5.0, 4), [64, 24, 16, 8, 4]),
    "r58 sync cut": (near_full({**SYNC, "enable_prefix_caching": True, "watermark": 0.0},
                               {"gpu_memory_utilization": 0.24}, 300, 200, 1000, 5.0, 58), [96, 48, 16, 12, 8]),
    "r18 refused": (near_full({**SYNC, "enable_prefix_caching": False, "watermark": 0.05},
                              {"gpu_memory_utilization": 0.226, "count": 2}, 300, 1000, 50, 20.0, 18),
                    [256, 40, 24, 8, 4]),
}


@pytest.mark.parametrize("case", [f"seed {seed}" for seed in SEEDS] + list(PINNED))
def test_near_full_pools_store_what_their_own_runs_store(tmp_path, monkeypatch, case):
    """Pins the witness's refusal flags, which only a pool near full reaches: with `refused` not set
    where KvCache.admit fails a capacity check, or where a decode run is cut short by free blocks
    (engine/vllm/group_runs.py, sync and async), a run some sibling's larger pool would have made
    otherwise is copied. Each case is a sweep over max_num_seqs whose rows with sharing must be those
    without; the seeds are fixed, so a failure names a case that reproduces."""
    if case in PINNED:
        config, limits = PINNED[case]
    else:
        config, limits = random_case(int(case.removeprefix("seed ")))
    shared, alone, _ = sweep_both(config, limits, tmp_path, monkeypatch)
    assert shared == alone
