"""The configuration, from what a user writes to what runs.

schema.py (the strict models), errors.py (one sentence per validation error), hints.py
('did you mean'), loading.py (`load_config`: a file, dict or model into a validated
`SimulationConfig`), overrides.py and backend_switch.py (`--set` as a user means it), and
resolution.py (`resolve`: every `null` that stands for an engine default filled, so the
resolved config says exactly what ran; imported apart, as it builds on cluster/). Field meanings, units and defaults are
documented in docs/config.md. Every name code imports from `servesim.config` is
re-exported here.
"""

from servesim.config.errors import error_sentence
from servesim.config.loading import (
    EMBEDDED_DEFAULT,
    LoadedConfig,
    config_hash,
    config_to_yaml,
    default_config_path,
    load_config,
    parse_override,
    read_config_file,
    set_dotted,
)
from servesim.config.schema import (
    AicTiming,
    BackendName,
    BenchClient,
    ClientConfig,
    ClosedLoopClient,
    EngineConfig,
    FixedTiming,
    KvOffloadConfig,
    KvTransferConfig,
    Length,
    LengthRange,
    OpenLoopClient,
    PoissonClient,
    PolynomialTiming,
    Rate,
    RoleConfig,
    RooflineTiming,
    RouterConfig,
    SchedulerConfig,
    SimulationConfig,
    SloConfig,
    SpeculativeConfig,
    SyntheticConfig,
    TimingConfig,
    TRACE_FORMATS,
    WorkersConfig,
    WorkloadConfig,
)
# Each engine's scheduler schema, re-exported from its package for code that imports it from here.
from servesim.engine.sglang.config import SglangSchedulerConfig
from servesim.engine.trtllm.config import TrtllmSchedulerConfig
from servesim.engine.vllm.config import VllmSchedulerConfig
from servesim.schema_base import (
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Probability,
    StrictModel,
)

_error_sentence = error_sentence   # its name before it was public

__all__ = [name for name in dir() if not name.startswith("__")]
