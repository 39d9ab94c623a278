"""Kept so that `from servesim.resolve import resolve` goes on working: now config/resolution.py."""

from servesim.config.resolution import ResolvedRun, resolve  # noqa: F401
