"""The sweep's progress bar: trials done, the best so far, elapsed time and ETA (rich)."""

from __future__ import annotations

from servesim.sweep.objective import derived_metrics


def best_text(judge, row: dict | None) -> str:
    if row is None:
        return "none yet"
    score = judge.score(row)
    if judge.objective.kind == "min_gpus":
        value = f"{score} GPUs"
    elif judge.objective.kind == "throughput_per_gpu":
        value = f"{score:,.0f} tok/s/GPU" if score is not None else "n/a"
    else:
        value = f"{score:,.3f} req/s/GPU" if score is not None else "n/a"
    slo = "meets SLOs" if judge.meets(row) else "misses SLOs"
    if row["status"] == "ok" and derived_metrics(row["summary"])["tok_s_per_user"] is not None:
        value += f", {derived_metrics(row['summary'])['tok_s_per_user']:,.0f} tok/s/user"
    return f"trial {row['trial_id']}: {value} ({slo})"


class SweepProgress:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._bar = None
        self._task = None

    def __call__(self, done: int, total: int, best: dict | None, judge) -> None:
        if not self.enabled:
            return
        text = best_text(judge, best)
        if self._bar is None:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)

            self._bar = Progress(TextColumn("trials"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 TextColumn("ETA"), TimeRemainingColumn(), TextColumn("best {task.fields[best]}"),
                                 transient=True)
            self._bar.start()
            # Trials found done are the starting point, not speed: the ETA counts only this run's pace.
            self._task = self._bar.add_task("sweep", total=total, completed=done, best=text)
            return
        self._bar.update(self._task, completed=done, total=total, best=text)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
