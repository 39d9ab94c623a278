"""servesim: a GPU-free simulator of LLM serving.

    import servesim
    result = servesim.simulate()          # the embedded default deployment and trace
    result.summary["median_ttft_ms"]
"""

__version__ = "0.1.0"

__all__ = ["Result", "ServesimError", "simulate", "__version__"]


def __getattr__(name: str):
    # Imported lazily so `import servesim` (and the CLI's start-up) stays cheap.
    if name in ("simulate", "Result"):
        from servesim import run

        return getattr(run, name)
    if name == "ServesimError":
        from servesim.errors import ServesimError

        return ServesimError
    raise AttributeError(f"module 'servesim' has no attribute {name!r}")
