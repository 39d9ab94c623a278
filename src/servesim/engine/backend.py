"""What an engine backend is to the rest of servesim: one `Backend` object per engine.

Each engine package (engine/vllm/, engine/sglang/, engine/trtllm/) defines its `Backend`
in its backend.py, and engine/registry.py lists them. Everything outside those packages
asks the registry instead of naming an engine: config validation (the scheduler schema,
counterpart names, feature rules, versions), resolution (the engine's own defaults), the
fleet (scheduler factories, the frontend's rejection rule, the KV cache's admission mode
and watermark), backend switching, sweeps and timing profiles. docs/modeling/backends.md
shows how to add an engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from servesim.engine.request_path import RequestPathCosts

# The neutral names of the settings every engine has under its own name, in the order
# an unknown key's counterpart is looked up (SGLang's chunked_prefill_size is both a
# token budget and the chunking switch; the budget comes first).
COUNTERPART_CONCEPTS = ("seqs", "budget", "block", "kv_tokens", "context", "memory_fraction", "prefix",
                        "chunked", "overlap")


class SchedulerSettings(Protocol):
    """The facts the engine core, the fleet and the reports read off any backend's resolved
    scheduler config, under neutral names (each schema maps them to its own keys)."""

    backend_name: ClassVar[str]        # the Backend this schema belongs to (engine/registry.py)

    @property
    def kv_block_size(self) -> int: ...        # tokens per KV block (page)

    @property
    def prefix_caching(self) -> bool: ...

    @property
    def context_limit(self) -> int: ...        # the longest sequence the frontend accepts

    def output_room(self, input_length: int) -> int: ...   # output tokens a prompt may still get

    @property
    def kv_blocks(self) -> int: ...            # KV cache blocks, the null block included

    @property
    def overlap(self) -> bool: ...             # scheduling overlaps the previous pass (async)


# (value, the old engine's validated scheduler) → {concept: value}: how a key reads when
# engine.backend switches away from its engine (servesim/config/backend_switch.py).
CarryReader = Callable[[Any, Any], dict[str, Any]]


def carry_as(concept: str) -> CarryReader:
    return lambda value, _: {concept: value}


def carry_as_not(concept: str) -> CarryReader:
    return lambda value, _: {concept: not value}


def _no_extra_writes(concepts: dict, origin: dict, kept: dict, out: dict) -> list[str]:
    return []


def _no_rejection(sched: Any, input_length: int) -> str | None:
    return None


def _no_words(code: str, number: int, sched: Any) -> str | None:
    return None


def _no_watermark(sched: Any) -> int:
    return 0


def _no_role_rule(role_cfg: Any, where: str, source_of: Callable[[str], str]) -> None:
    return None


def _no_prefill_graphs(sched: Any) -> int:
    return 0


def _never_shared(config: dict) -> None:
    return None


def _no_witness(sim: Any) -> None:
    return None


def _covers_nothing(witnessed: Any, witness: Any, other: Any) -> bool:
    return False


def imported_on_call(module: str, name: str) -> Callable[..., Any]:
    """`module.name`, imported when first called: an engine's launch builders serve `servesim deploy`,
    and importing them with the registry cost every run about 2% of a one-request run's instructions."""

    def call(*args, **kwargs):
        from importlib import import_module

        return getattr(import_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


@dataclass(frozen=True)
class Backend:
    """One engine as servesim models it."""

    name: str                          # engine.backend's value: "vllm"
    label: str                         # as people write it: "vLLM"
    versions: tuple[str, ...]          # the upstream versions modelled, oldest first (engine.version)
    schema: type                       # engine.workers.*.scheduler's pydantic model (a SchedulerSettings)
    # COUNTERPART_CONCEPTS → this engine's key for it; a leading "!" marks an inverted boolean.
    counterparts: dict[str, str]
    # engine.backend switches (config/backend_switch.py): this engine's keys read as concepts, and
    # concepts written back as (key, conversion); `carry_write_extra(concepts, origin, kept, out)`
    # adds what a plain rename cannot say and returns the old keys it could not carry.
    carry_reads: dict[str, CarryReader]
    carry_writes: dict[str, tuple[str, Callable[[Any], Any]]]
    # The engine's defaults for every null: (sched, where, gpu, model, deployment, role_cfg, role)
    # → the resolved scheduler config, or a ServesimError naming `where`.
    resolve_scheduler: Callable[..., Any]
    # (resolved sched, kv cache, reference) → the scheduler; reference: the per-request form.
    make_scheduler: Callable[[Any, Any, bool], Any]
    # The keys `servesim recommend` sweeps: running requests, tokens a pass, and the context.
    sweep_knobs: tuple[str, str, str]
    # The token budget must be at least the running-request limit (vLLM's SchedulerConfig check).
    budget_covers_running: bool = False
    # The KV cache admits a request only if its whole sequence fits (vLLM); else only the
    # tokens the scheduler budgets for this pass (SGLang, TensorRT-LLM budget themselves).
    kv_full_sequence_admission: bool = True
    kv_watermark_blocks: Callable[[Any], int] = _no_watermark
    # Why the frontend refuses a prompt of this length beyond the shared rule that it must
    # leave room for one output token (None: it does not); a requests.csv reason code.
    reject_reason: Callable[[Any, int], str | None] = _no_rejection
    # Its words for such a code: (code, input length, sched) → requests.csv's error cell, and
    # (code, how many requests, sched) → a part of the run's rejection warning.
    rejection_text: Callable[[str, int, Any], str | None] = _no_words
    rejection_summary: Callable[[str, int, Any], str | None] = _no_words
    carry_write_extra: Callable[[dict, dict, dict, dict], list[str]] = _no_extra_writes
    # Checks of one role's settings that depend on this engine: (role_cfg, where, source_of).
    check_role: Callable[[Any, str, Callable[[str], str]], None] = _no_role_rule
    kv_offload: bool = True            # a host-memory tier under the prefix cache is modelled
    # Why pp > 1 is refused for this engine, in words (None: its pipeline loop is modelled,
    # engine/pipeline.py).
    pp_refusal: str | None = "pipeline parallelism is not modelled for this engine"
    timing_profile: str = ""           # fitted roofline profiles are keyed "<gpu>/<timing_profile>"
    aic_backend: str | None = None     # aiconfigurator-core's name for the engine (timing kind aic)
    # The largest pass with prefill work (tokens) it replays from CUDA graphs; larger ones run
    # eagerly, op by op from the host (timing/roofline.py). vLLM: its capture size (piecewise
    # graphs); SGLang up to 0.5.9 and TensorRT-LLM's context phase: none.
    prefill_graph_tokens: Callable[[Any], int] = _no_prefill_graphs
    # Sweep trials that compute one run (sweep/sharing.py, docs/modeling/shared_runs.md):
    # `share_key(trial config as given)` → (group, rank) or None; each group's highest rank runs,
    # `run_witness(its finished simulation)` records what the run read of the knobs its siblings
    # change (None: it proves nothing), and `run_covers(its RunSpec, witness, a sibling's RunSpec)`
    # says whether the sibling's run is provably that same run. By default nothing is shared.
    share_key: Callable[[dict], tuple[str, int] | None] = _never_shared
    run_witness: Callable[[Any], Any] = _no_witness
    run_covers: Callable[[Any, Any, Any], bool] = _covers_nothing
    # Its API server's costs around the passes (engine/request_path.py; None: not modelled).
    request_path: RequestPathCosts | None = None
    # Disaggregated serving: its proxy asks the decode server only once the prefill server has
    # answered (vLLM's toy proxy, trtllm-serve disaggregated), or both at once (SGLang's mini_lb).
    pd_proxy_sequential: bool = True
    # Its server's command line for one role (engine/launch.py: RoleLaunch → LaunchCommand;
    # None: `servesim deploy` cannot write one).
    launch: Callable[[Any], Any] | None = None
    # The proxy or router in front of its roles (FrontLaunch → LaunchCommand, or None: clients
    # reach the servers' own Service directly).
    front: Callable[[Any], Any] | None = None
    # Its Dynamo worker: (RoleLaunch, LaunchCommand) → (module, args), and Dynamo's runtime image
    # name for it (None: `servesim deploy --stack dynamo` cannot write one).
    dynamo_worker: Callable[[Any, Any], tuple[str, tuple[str, ...]]] | None = None
    dynamo_runtime: str = ""
    # The llm-d-modelservice chart's modelCommand that writes its server line (None: the chart
    # has none for it, and `servesim deploy --stack llm-d` refuses).
    llm_d_model_command: str | None = None

    @property
    def newest_version(self) -> str:
        return self.versions[-1]

    @property
    def length_limit_key(self) -> str:
        """The scheduler key that bounds a sequence (vLLM's max_model_len)."""
        return self.counterparts["context"]

    def counterpart_of(self, concept: str) -> str | None:
        """This engine's key for a concept, as an error names it ("x (inverted)" for a "!" key)."""
        name = self.counterparts.get(concept)
        if name is None:
            return None
        return f"{name[1:]} (inverted)" if name.startswith("!") else name

    def profile_key(self, gpu: str) -> str:
        return f"{gpu}/{self.timing_profile}"
