"""How a group of trials that may share a run (sweep/executor.py `run_group`) hands back the
siblings its run does not cover: one group again only where a lower limit's run may still cover
them, else each alone, so they run side by side; a failure never escapes as an exception."""

from __future__ import annotations

import copy

import servesim.sweep.sharing as sharing
from servesim.sweep.executor import InlineExecutor, after_loss, run_group


def trial(max_num_seqs: int, prefix_length: int = 0, requests: int = 12) -> dict:
    """Llama-3.1-8B on one H100, a short Poisson workload (a lower limit leaves more blocks)."""
    return {
        "model": "llama-3.1-8b", "gpu": "h100-sxm",
        "engine": {"backend": "vllm", "timing": {"kind": "roofline"},
                   "workers": {"aggregated": {"scheduler": {"max_model_len": 2048,
                                                            "max_num_seqs": max_num_seqs}}}},
        "workload": {"synthetic": {"num_requests": requests, "input_length": {"min": 50, "max": 300},
                                   "output_length": {"min": 5, "max": 40}, "prefix_length": prefix_length},
                     "client": {"mode": "poisson", "rate": 40.0}},
    }


def test_a_failed_first_trial_hands_each_sibling_back_alone():
    bad = trial(256)
    bad["model"] = "no-such-model"
    group = [(0, bad), (1, copy.deepcopy(bad)), (2, copy.deepcopy(bad))]
    out, rest = run_group(group)
    assert [(tid, o["status"]) for tid, o in out] == [(0, "error")]
    assert rest == [[group[1]], [group[2]]]   # no witness: nothing to chain on


def test_a_run_that_proves_nothing_hands_each_sibling_back_alone(monkeypatch):
    """Every prompt shares a 64-token prefix, so lookups hit: the witness is None and no copy is
    even tried."""
    tried = []
    monkeypatch.setattr(sharing, "copied_outcome", lambda *args: tried.append(args))
    group = [(0, trial(256, 64)), (1, trial(128, 64)), (2, trial(64, 64))]
    out, rest = run_group(group)
    assert [(tid, o["status"]) for tid, o in out] == [(0, "ok")]
    assert rest == [[group[1]], [group[2]]] and tried == []


def test_a_copy_that_raises_leaves_the_sibling_to_run(monkeypatch):
    """A bug inside the copy (here: RuntimeError) does not escape run_group, which would end the
    sweep; the sibling runs and reports its own outcome. The run has a witness, so the siblings
    go back as one group."""
    calls = []

    def broken(*args):
        calls.append(args)
        raise RuntimeError("a bug")

    monkeypatch.setattr(sharing, "copied_outcome", broken)
    group = [(0, trial(256)), (1, trial(128)), (2, trial(64))]
    out, rest = run_group(group)
    assert len(calls) == 2   # the witness was there: both copies were tried
    assert [(tid, o["status"]) for tid, o in out] == [(0, "ok")]
    assert rest == [[group[1], group[2]]]


def test_the_inline_executor_runs_the_handed_back_siblings_in_order(monkeypatch):
    monkeypatch.setattr(sharing, "copied_outcome", lambda *args: None)
    group = [(5, trial(256, 64)), (3, trial(128, 64)), (4, trial(64, 64))]
    outcomes = list(InlineExecutor().run([group, [(9, trial(32))]]))
    assert [tid for tid, _ in outcomes] == [5, 3, 4, 9]
    assert all(o["status"] == "ok" for _, o in outcomes)


def test_a_lost_job_loses_only_the_trial_it_was_running():
    group = [(0, {}), (1, {}), (2, {})]
    assert after_loss(group) == [[(1, {}), (2, {})]]
    assert after_loss(group[:1]) == []
