"""Per-session metrics of a `workload.sessions` run: sessions.csv, summary.json's `sessions`
block, the printed table's session lines.

A session's start is its first turn's arrival at the frontend, its end the moment its last
turn's last token reaches the user (a rejected turn's: when it was refused). A session is
complete when every planned turn was served (none rejected). The block counts every
session: warm-up requests are left out of the request metrics only.
"""

from __future__ import annotations

from typing import TextIO

import numpy as np

from servesim.metrics.records import _NONE, RequestTable, _ms

SESSION_COLUMNS = ("session_id", "planned_turns", "turns", "completed", "start_ms", "end_ms", "duration_ms",
                   "meets_slo", "input_tokens", "output_tokens", "cached_tokens", "ttft_ms_by_turn",
                   "cached_tokens_by_turn")
_REJECTED = 2   # records.STATUSES index


class SessionTable:
    """Every session's turns, by session and turn index, from the request records."""

    def __init__(self, records: RequestTable, log, slo_ms: float | None = None) -> None:
        column = records.column   # in completion order; a turn never sent has no record
        ids = column("request_id")
        self.session_of = log.session_of   # by request id
        self.slo_ms = slo_ms
        self.truncated = getattr(log, "truncated", None)   # set with max_context_tokens
        self.planned = np.asarray(log.planned_turns[:log.started], dtype=np.int64)
        count = len(self.planned)
        session = np.asarray(log.session_of, dtype=np.int64)[ids]
        turn = np.asarray(log.turn_of, dtype=np.int64)[ids]
        arrival, first, finish = column("arrival_ns"), column("first_token_ns"), column("finish_ns")
        served = column("status") != _REJECTED
        self.turns = np.bincount(session, minlength=count)
        rejected = np.bincount(session, weights=~served, minlength=count) > 0
        self.completed = (self.turns == self.planned) & ~rejected
        self.start = np.full(count, _NONE, dtype=np.int64)
        self.start[session[turn == 0]] = arrival[turn == 0]
        self.end = np.full(count, _NONE, dtype=np.int64)
        np.maximum.at(self.end, session, finish)
        self.input = np.bincount(session, weights=column("input_length"), minlength=count).astype(np.int64)
        self.output = np.bincount(session, weights=column("output_length"), minlength=count).astype(np.int64)
        self.cached = np.bincount(session, weights=column("cached_tokens"), minlength=count).astype(np.int64)
        # By turn: (session, turn) -> request position, for the per-turn cells and the block.
        self._session, self._turn, self._served = session, turn, served
        self._ttft = np.where(first != _NONE, first - arrival, _NONE)
        self._cached_turn, self._prompt = column("cached_tokens"), column("input_length")

    def __len__(self) -> int:
        return len(self.planned)

    def _by_session(self) -> list[list[int]]:
        rows: list[list[int]] = [[] for _ in range(len(self))]
        for position in np.lexsort((self._turn, self._session)).tolist():
            rows[self._session[position]].append(position)
        return rows

    def write_csv(self, fh: TextIO) -> None:
        fh.write(",".join(SESSION_COLUMNS) + "\n")
        ttft, cached = self._ttft.tolist(), self._cached_turn.tolist()
        for s, positions in enumerate(self._by_session()):
            start, end = int(self.start[s]), int(self.end[s])
            duration = end - start if self.completed[s] else None
            meets = "" if self.slo_ms is None else str(bool(self._meets()[s])).lower()
            cells = (str(s), str(self.planned[s]), str(self.turns[s]), str(bool(self.completed[s])).lower(),
                     _ms(start), _ms(end), _ms(duration), meets, str(self.input[s]), str(self.output[s]),
                     str(self.cached[s]),
                     ";".join(_ms(None if ttft[p] == _NONE else ttft[p]) for p in positions),
                     ";".join(str(cached[p]) for p in positions))
            fh.write(",".join(cells) + "\n")

    def _meets(self) -> np.ndarray:
        """Complete, and done within the SLO (ns compared exactly against the ms bound)."""
        return self.completed & ((self.end - self.start) <= self.slo_ms * 1e6)

    def summary(self) -> dict:
        """summary.json's `sessions` block: durations of complete sessions, TTFT and hits by turn."""
        done = self.completed
        durations = (self.end[done] - self.start[done]) / 1e6
        by_turn_ttft, by_turn_p90, by_turn_hits = [], [], []
        served = self._served
        for k in range(int(self._turn.max(initial=-1)) + 1):
            at = (self._turn == k) & served
            ttft = self._ttft[at] / 1e6
            by_turn_ttft.append(float(ttft.mean()) if len(ttft) else None)
            by_turn_p90.append(float(np.percentile(ttft, 90)) if len(ttft) else None)
            prompt = int(self._prompt[at].sum())
            by_turn_hits.append(int(self._cached_turn[at].sum()) / prompt if prompt else None)

        def stat(fn) -> float | None:
            return float(fn(durations)) if len(durations) else None

        return {
            "num_sessions": len(self),
            "completed_sessions": int(done.sum()),
            "turns": int(self.turns.sum()),
            "mean_turns": float(self.turns.mean()) if len(self) else None,
            "mean_duration_ms": stat(np.mean),
            "median_duration_ms": stat(np.median),
            "p90_duration_ms": stat(lambda d: np.percentile(d, 90)),
            "p99_duration_ms": stat(lambda d: np.percentile(d, 99)),
            "mean_ttft_ms_by_turn": by_turn_ttft,
            "p90_ttft_ms_by_turn": by_turn_p90,
            "prefix_cache_hit_rate_by_turn": by_turn_hits,
            **({} if self.slo_ms is None else {
                "slo_ms": self.slo_ms,
                "sessions_meeting_slo": int(self._meets().sum()),
                "session_slo_attainment": float(self._meets().mean()) if len(self) else None}),
            **({} if self.truncated is None else {"truncated_turns": self.truncated}),
        }


def session_table(records: RequestTable, log, slo_ms: float | None = None) -> SessionTable:
    return SessionTable(records, log, slo_ms)


def session_rows(summary: dict) -> list[tuple[str, str] | str]:
    """The printed table's session lines (metrics/table.py), when the run had sessions."""
    block = summary.get("sessions")
    if block is None:
        return []

    def num(value, digits: int = 2) -> str:
        return "n/a" if value is None else (f"{value:,}" if isinstance(value, int) else f"{value:,.{digits}f}")

    ttft, hits = block["mean_ttft_ms_by_turn"], block["prefix_cache_hit_rate_by_turn"]
    rows: list[tuple[str, str] | str] = [
        "Sessions",
        ("Sessions (complete / all)", f"{block['completed_sessions']:,} / {block['num_sessions']:,}"),
        ("Mean turns per session", num(block["mean_turns"])),
        ("Mean session duration (s)", num(None if block["mean_duration_ms"] is None
                                          else block["mean_duration_ms"] / 1e3)),
        ("P99 session duration (s)", num(None if block["p99_duration_ms"] is None
                                         else block["p99_duration_ms"] / 1e3)),
        ("Mean TTFT, first turn (ms)", num(ttft[0] if ttft else None)),
    ]
    if "sessions_meeting_slo" in block:
        rows.append((f"Sessions within {block['slo_ms']:g} ms",
                     f"{block['sessions_meeting_slo']:,} ({100 * (block['session_slo_attainment'] or 0):.1f}%)"))
    if "truncated_turns" in block:
        rows.append(("Turns cut to the context window", f"{block['truncated_turns']:,}"))
    if len(ttft) > 1:
        rows.append((f"Mean TTFT, turn {len(ttft)} (ms)", num(ttft[-1])))
        rows.append((f"Prefix cache hit rate, turn {len(hits)} (%)",
                     num(None if hits[-1] is None else 100 * hits[-1])))
    return rows
