"""Kept so that `from servesim.resolve import resolve` goes on working: now config/resolution.py, which returns
config/run_spec.py's RunSpec."""

from servesim.config.resolution import ResolvedRun, resolve  # noqa: F401
from servesim.config.run_spec import RoleSpec, RunSpec  # noqa: F401
