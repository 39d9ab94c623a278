"""Median predicted / measured TTFT and TPOT by backend and concurrency band, from accuracy.py's
predictions: python benchmarks/bands.py PREDICTIONS.csv [--before OLD.csv] [--mode agg]

Bands are 1-4, 8-32, 64-256 and 512+ users; a band with fewer than 10 rows is merged into
its lower neighbour (the table says which). With --before, each cell shows before -> after
on the rows both files predicted.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

BANDS = ((1, 4), (8, 32), (64, 256), (512, 10**9))
MIN_ROWS = 10


def _rows(path: Path, mode: str) -> dict[str, dict]:
    with open(path, newline="") as fh:
        return {r["id"]: r for r in csv.DictReader(fh) if r["mode"] == mode and r["predicted_ttft_ms"]}


def _band(users: int) -> int:
    return next(i for i, (lo, hi) in enumerate(BANDS) if users <= hi)


def _merged(counts: list[int]) -> list[list[int]]:
    """Band indices grouped so that every group but a lone one has at least MIN_ROWS rows."""
    groups: list[list[int]] = []
    for index, count in enumerate(counts):
        if groups and sum(counts[i] for i in groups[-1]) < MIN_ROWS:
            groups[-1].append(index)
        else:
            groups.append([index])
    if len(groups) > 1 and sum(counts[i] for i in groups[-1]) < MIN_ROWS:
        groups[-2].extend(groups.pop())
    return groups


def _label(group: list[int]) -> str:
    lo, hi = BANDS[group[0]][0], BANDS[group[-1]][1]
    return f"{lo}+" if hi >= 10**9 else f"{lo}-{hi}"


def table(after: dict[str, dict], before: dict[str, dict] | None, metric: str) -> list[str]:
    ids = set(after) & set(before) if before is not None else set(after)
    lines = [f"| backend | {metric.upper()} predicted / measured by band (rows) |", "|---|---|"]
    for backend in sorted({after[i]["backend"] for i in ids}):
        mine = [i for i in ids if after[i]["backend"] == backend]
        counts = [sum(1 for i in mine if _band(int(after[i]["concurrency"])) == b) for b in range(len(BANDS))]
        cells = []
        for group in _merged(counts):
            members = [i for i in mine if _band(int(after[i]["concurrency"])) in group]
            if not members:
                continue

            def ratio(rows: dict[str, dict]) -> float:
                return statistics.median(float(rows[i][f"predicted_{metric}_ms"]) / float(rows[i][f"silicon_{metric}_ms"])
                                         for i in members)
            text = f"{ratio(before):.2f} -> {ratio(after):.2f}" if before is not None else f"{ratio(after):.2f}"
            cells.append(f"{_label(group)}: {text} ({len(members)})")
        lines.append(f"| {backend} | " + "; ".join(cells) + " |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("predictions", type=Path)
    parser.add_argument("--before", type=Path)
    parser.add_argument("--mode", default="agg", choices=["agg", "disagg"])
    args = parser.parse_args(argv)
    after = _rows(args.predictions, args.mode)
    before = _rows(args.before, args.mode) if args.before else None
    for metric in ("ttft", "tpot"):
        print("\n".join(table(after, before, metric)))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
