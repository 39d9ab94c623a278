"""The ranked table of a sweep (`servesim sweep`, `servesim recommend`), readable at any width.

At its natural width the table has a column per figure, with one-line headers. In a
narrower terminal (80 columns is common) rich would cut every header and cell to fit
(`max_n…`, `good…`, even `30.3…` for 30.303), so a second layout is used there: no rank
column (rows stay in rank order), the parameters listed under the table by trial instead
of in a column, headers over two lines, and numbers that never wrap or get cut.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

FIGURE_HEADERS = ("GPUs", "goodput/GPU", "tok/s/GPU", "tok/s/user", "p{pct} TTFT", "p{pct} TPOT")
NARROW_HEADERS = ("GPUs", "goodput\n/GPU", "tok/s\n/GPU", "tok/s\n/user", "p{pct}\nTTFT", "p{pct}\nTPOT")


@dataclass
class RankedRow:
    trial: int
    fleet: str
    params: str                 # the candidate's parameters, "(+N alike)" included
    figures: tuple[str, ...]    # formatted, one per FIGURE_HEADERS


def _wide(rows: list[RankedRow], pct: int, title: str, caption: str) -> Table:
    table = Table(title=title, caption=caption)
    for column in ("#", "trial", "fleet", "params", *(h.format(pct=pct) for h in FIGURE_HEADERS)):
        table.add_column(column, justify="left" if column in ("fleet", "params") else "right")
    for rank, row in enumerate(rows, 1):
        table.add_row(str(rank), str(row.trial), row.fleet, row.params, *row.figures)
    return table


def _narrow(rows: list[RankedRow], pct: int, title: str, caption: str) -> Table:
    table = Table(title=title, caption=caption)
    table.add_column("trial", justify="right", no_wrap=True)
    table.add_column("fleet", justify="left", ratio=1, min_width=8)
    for i, header in enumerate(NARROW_HEADERS):
        longest = max([len(r.figures[i]) for r in rows] + [len(line) for line in header.format(pct=pct).split("\n")])
        table.add_column(header.format(pct=pct), justify="right", no_wrap=True, min_width=longest)
    for row in rows:
        table.add_row(str(row.trial), row.fleet, *row.figures)
    return table


def natural_width(console: Console, table: Table) -> int:
    """The columns `table` takes when nothing in it wraps."""
    return Measurement.get(console, console.options.update(max_width=100_000), table).maximum


def print_ranked(console: Console, rows: list[RankedRow], pct: int, title: str, caption: str) -> bool:
    """Print the table in the layout that fits `console`; return whether it is the narrow one."""
    wide = _wide(rows, pct, title, caption)
    if natural_width(console, wide) <= console.width:
        console.print(wide)
        return False
    console.print(_narrow(rows, pct, title, caption))
    if any(row.params for row in rows):
        console.print("Parameters by trial:")
    for row in rows:
        if row.params:
            console.print(f"  trial {row.trial}: {row.params}")
    return True
