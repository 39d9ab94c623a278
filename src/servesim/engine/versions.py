"""The upstream engine versions whose scheduling contracts servesim models.

Each engine's modelling page in docs/modeling/ names the files and functions
followed at that version; `servesim --version` and summary.json report these.
"""

ENGINE_VERSIONS: dict[str, str] = {
    "vllm": "0.32.0",      # docs/modeling/vllm.md: v1 Scheduler/AsyncScheduler, checked by the oracle
    "sglang": "0.5.9",     # docs/modeling/sglang.md: the PyPI wheel's scheduler
    "trtllm": "1.2.0rc2",  # docs/modeling/trtllm.md: version.py of the sources read
}

ENGINE_LABELS: dict[str, str] = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}


def engine_versions_line() -> str:
    """`vLLM 0.32.0, SGLang 0.5.9, TensorRT-LLM 1.2.0rc2`."""
    return ", ".join(f"{ENGINE_LABELS[name]} {version}" for name, version in ENGINE_VERSIONS.items())
