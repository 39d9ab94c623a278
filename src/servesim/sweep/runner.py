"""One sweep, start to finish: plan the trials, run what the store lacks, promote rung by rung.

The coordinator is the only writer of the store; it records each outcome the moment it
arrives, whatever the order. Promotions wait for the whole rung and read its results in
trial-id order (trials.promote), so a sweep's trials and results depend only on the
base config, the space and the seed — not on worker timing, nor on interruptions.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from servesim.config import SloConfig, error_sentence, read_config_file
from servesim.errors import ServesimError
from servesim.sweep.objective import Judge
from servesim.sweep.sharing import share_groups
from servesim.sweep.space import SweepSpace
from servesim.sweep.store import DONE, TrialStore
from servesim.sweep.trials import Plan, promote

STORE_FORMAT = "1"


@dataclass
class SweepResult:
    plan: Plan
    judge: Judge
    rows: dict[int, dict]               # completed trials (ok or error) by id
    store: TrialStore
    ran: int = 0                        # trials run by this invocation
    reused: int = 0                     # trials found already done
    lost: list[int] = field(default_factory=list)   # trials whose worker died; --resume reruns them

    @property
    def complete(self) -> bool:
        return not self.lost

    def final_rows(self) -> list[dict]:
        """Completed trials of the last rung (the whole workload), by trial id."""
        final = self.plan.final_rung
        return [row for tid, row in sorted(self.rows.items()) if row["rung"] == final]


ProgressFn = Callable[[int, int, "dict | None", Judge], None]   # (trials done, total, best row so far, judge)


def run_sweep(base: dict, space: SweepSpace, out: Path, executor, resume: bool = False,
              progress: ProgressFn | None = None) -> SweepResult:
    plan = Plan(base, space)
    judge = Judge.for_space(space, _base_slo(plan.base), priced=bool((plan.base.get("cost") or {}).get(
        "gpu_price_per_hour")))
    store = TrialStore(out)
    meta = {"format": STORE_FORMAT, "config": json.dumps(base, sort_keys=True, default=str),
            "space": space.canonical()}
    try:
        reused = store.begin(meta, resume)
        result = SweepResult(plan, judge, store.rows(done_only=True), store, reused=reused)
        _run_rungs(result, executor, progress)
    except BaseException:
        store.close()
        raise
    return result


def load_base(path: Path) -> dict:
    """A sweep's base config file as a dict, its relative paths made absolute (trials run anywhere)."""
    path = Path(path)
    data = read_config_file(path)
    folder = path.resolve().parent
    workload = data.get("workload")
    if isinstance(workload, dict):
        if isinstance(workload.get("trace"), str):
            workload["trace"] = os.path.normpath(folder / Path(workload["trace"]).expanduser())
            if not Path(workload["trace"]).is_file():
                raise ServesimError(f"{path}: workload.trace {workload['trace']} does not exist")
        synthetic = workload.get("synthetic")
        if isinstance(synthetic, dict) and isinstance(synthetic.get("lengths_from"), str):
            synthetic["lengths_from"] = os.path.normpath(folder / Path(synthetic["lengths_from"]).expanduser())
        if isinstance(synthetic, dict) and isinstance(synthetic.get("lengths_tokenizer"), str):
            synthetic["lengths_tokenizer"] = os.path.normpath(
                folder / Path(synthetic["lengths_tokenizer"]).expanduser())
    timing = (data.get("engine") or {}).get("timing") if isinstance(data.get("engine"), dict) else None
    if isinstance(timing, dict) and isinstance(timing.get("profile_file"), str):   # servesim calibrate's
        timing["profile_file"] = os.path.normpath(folder / Path(timing["profile_file"]).expanduser())
    model = data.get("model")
    if isinstance(model, str) and model.endswith(".json"):
        data["model"] = os.path.normpath(folder / Path(model).expanduser())
    return data


def _base_slo(base: dict) -> SloConfig:
    raw = base.get("slo") or {}
    try:
        return SloConfig.model_validate(raw)
    except ValidationError as err:
        raise ServesimError(error_sentence(err, raw, "config", prefix="slo")) from None


def _run_rungs(result: SweepResult, executor, progress: ProgressFn | None) -> None:
    plan, judge, rows, store = result.plan, result.judge, result.rows, result.store
    candidates = plan.candidates
    done = 0
    for rung, budget in enumerate(plan.budgets):
        trials = plan.trials(rung, candidates)
        for trial in trials:
            stored = rows.get(trial.trial_id)
            if stored is not None and stored["config_hash"] != trial.config_hash:
                raise ServesimError(f"trial {trial.trial_id} in {store.path} was run with another config; "
                                    "choose another --out")
        missing = [t for t in trials if t.trial_id not in rows]
        done += len(trials) - len(missing)
        best = _best(judge, [rows[t.trial_id] for t in trials if t.trial_id in rows])
        if progress:
            progress(done, plan.total_trials, best, judge)
        by_id = {t.trial_id: t for t in missing}
        groups = [[(t.trial_id, t.config) for t in group] for group in share_groups(missing)]
        for trial_id, outcome in executor.run(groups):
            row = store.record(by_id[trial_id], outcome)
            done += 1
            result.ran += 1
            if row["status"] in DONE:
                rows[trial_id] = row
                best = _best(judge, [b for b in (best, row) if b is not None])
            else:
                result.lost.append(trial_id)
            if progress:
                progress(done, plan.total_trials, best, judge)
        if result.lost:
            return   # a rung with holes cannot be ranked; --resume fills them
        if rung < plan.final_rung:
            candidates = promote(trials, rows, plan.sizes[rung + 1], judge.rank_key)


def _best(judge: Judge, rows: list[dict]) -> dict | None:
    return judge.ranked(rows)[0] if rows else None
