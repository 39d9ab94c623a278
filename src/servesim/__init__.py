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


def __dir__() -> list[str]:
    # The lazy names above are not in the module's namespace until first used; list them
    # (and nothing imported on the way) so `dir(servesim)` and tab completion show the API.
    return sorted(__all__)
