"""Which engine runs each role, fast or reference, and why: decided here and nowhere else.

The fast engine (aggregate decode groups, fast-forwarded runs of decode passes, the lazily
keyed KV cache) and the reference engine (the per-request form of the same rules) give the
same results; the reference is chosen when something needs what only it has:

- engine.reference or a per-token delivery callback (each token's time as it happens):
  the whole run, cache and scheduler, is the reference (a pass log and per-request token
  times are not reasons: the fast engine writes them too);
- KV offload: the host tier sits under the reference cache, where every full block has
  its key (the fast cache's lazily keyed blocks would store different keys), so that
  role runs the reference cache and scheduler;
- speculative decoding: drafts make decoding requests advance by different amounts, so
  the fast engine's lockstep decode group does not apply: that role runs the per-request
  scheduler (over the fast cache);
- pipeline parallelism (pp > 1): several batches are in flight at once and a request waits
  for its batch's outputs before it is scheduled again, which the fast engine's lockstep
  decode group and fast-forwarded runs do not follow: that role runs the per-request
  scheduler (over the fast cache; engine/pipeline.py).

summary.json's `simulated.engine`/`engine_reason` give the run's choice and
`simulated.roles.<role>.engine` each role's (docs/outputs.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from servesim.config.run_spec import RunSpec

FAST, REFERENCE = "fast", "reference"
DEFAULT_REASON = "the default (the reference engine gives the same results, more slowly)"
OFFLOAD_REASON = "KV offload runs the exact KV cache (cluster/fleet.py: host-tier keys must be exact)"
SPECULATIVE_REASON = "speculative decoding runs the per-request engine (no lockstep decode group)"
PIPELINE_REASON = "pipeline parallelism runs the per-request engine (several batches in flight)"


@dataclass(frozen=True)
class EngineChoice:
    path: str                  # FAST or REFERENCE: the scheduler's form
    reason: str                # why, in words summary.json shows
    exact_cache: bool          # the reference KV cache (every full block keyed) under it

    @property
    def reference_scheduler(self) -> bool:
        return self.path == REFERENCE


@dataclass(frozen=True)
class RunEngines:
    """The run's choice (summary.json's `simulated.engine`) and each role's."""

    path: str
    reason: str
    roles: dict[str, EngineChoice]


def whole_run_reason(reference: bool, pass_log: bool, token_times: bool, on_token: bool = False) -> str | None:
    """Why the whole run is the reference engine (None: nothing asks for it)."""
    # A pass log and per-request token times do not: the fast engine names every request of
    # its logical passes when a collector asks for them (engine/passes.py's PassRun).
    if reference:
        return "engine.reference is true"
    if on_token:
        return "a per-token delivery callback was given: it needs each token's time"
    return None


def choose_engines(spec: RunSpec, pass_log: bool, token_times: bool, on_token: bool = False) -> RunEngines:
    """The engine of every role of the run."""
    roles = spec.roles
    whole = whole_run_reason(spec.reference, pass_log, token_times, on_token)
    if whole is not None:
        return RunEngines(REFERENCE, whole, {name: EngineChoice(REFERENCE, whole, True) for name in roles})
    choices = {}
    for name, role in roles.items():
        if role.kv_offload is not None:
            choices[name] = EngineChoice(REFERENCE, OFFLOAD_REASON, True)
        elif role.speculative is not None:
            choices[name] = EngineChoice(REFERENCE, SPECULATIVE_REASON, False)
        elif role.pp > 1:
            choices[name] = EngineChoice(REFERENCE, PIPELINE_REASON, False)
        else:
            choices[name] = EngineChoice(FAST, DEFAULT_REASON, False)
    # The run's reason: offload, then speculative decoding, then pipelines, over all roles.
    for reason in (OFFLOAD_REASON, SPECULATIVE_REASON, PIPELINE_REASON):
        if any(choice.reason == reason for choice in choices.values()):
            return RunEngines(REFERENCE, reason, choices)
    return RunEngines(FAST, DEFAULT_REASON, choices)
