"""The sweep's progress bar: trials done, the best so far, elapsed time and ETA (rich)."""

from __future__ import annotations

def best_text(judge, row: dict | None) -> str:
    """`best #17 1.234 req/s/GPU ✓SLOs` (short: it shares a line with the bar; ✗ when it misses them)."""
    if row is None:
        return "best: none yet"
    score = judge.score(row)
    if score is None:
        value = "n/a"
    elif judge.objective.kind == "min_gpus":
        value = f"{score} GPUs"
    elif judge.objective.kind == "throughput_per_gpu":
        value = f"{score:,.0f} tok/s/GPU"
    elif judge.objective.kind == "cost_per_mtok":
        value = f"${score:,.3f}/Mtok"
    elif judge.objective.kind == "goodput_per_dollar":
        value = f"{score:,.0f} req/$"
    else:
        value = f"{score:,.3f} req/s/GPU"
    return f"best #{row['trial_id']} {value} {'✓' if judge.meets(row) else '✗'}SLOs"


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
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(TextColumn("trials"), BarColumn(bar_width=12), MofNCompleteColumn(),
                                 TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[best]}"),
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
