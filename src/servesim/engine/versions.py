"""The upstream engine versions servesim models: now each Backend's (engine/registry.py).

Kept so that `from servesim.engine.versions import engine_versions_line` goes on working.
"""

from servesim.engine.registry import engine_versions_line  # noqa: F401
