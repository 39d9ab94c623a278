"""The `servesim` command line's entry point (`main`); the commands are typer's, in cli_app.py.

A plain `servesim run` command line (cli_run.py says which) and `servesim --version` run without
typer, whose start-up and parameter adapters are a large part of a short run; every other command
line goes through the typer app.
"""

from __future__ import annotations

import os
import sys

from servesim import startup_gc

# Names that lived here before the commands moved to cli_app.py (`from servesim.cli import app`).
_APP_NAMES = ("app", "RAY_LOCAL", "_optional_ray_address", "_fail")


def __getattr__(name: str):
    if name in _APP_NAMES:
        from servesim import cli_app

        return getattr(cli_app, name)
    raise AttributeError(f"module 'servesim.cli' has no attribute {name!r}")


_PLUGIN_LOADER = "pydantic.plugin._loader"


def _skip_pydantic_plugin_loader() -> None:
    """With pydantic's plugins off, stand in for its plugin loader, whose import alone pulls in
    importlib.metadata (and email, zipfile, csv ...: about 4% of a one-request run) to find none.

    The stand-in answers as the loader does while the variable says off (no plugins), and hands
    over to the real loader should the variable change later in the process.
    """
    if os.environ.get("PYDANTIC_DISABLE_PLUGINS") not in ("__all__", "1", "true") or _PLUGIN_LOADER in sys.modules:
        return
    import types

    def get_plugins():
        if os.environ.get("PYDANTIC_DISABLE_PLUGINS") in ("__all__", "1", "true"):
            return ()
        import importlib

        del sys.modules[_PLUGIN_LOADER]
        return importlib.import_module(_PLUGIN_LOADER).get_plugins()

    stand_in = types.ModuleType(_PLUGIN_LOADER, "servesim's stand-in while pydantic's plugins are off (cli.py)")
    stand_in.get_plugins = get_plugins
    sys.modules[_PLUGIN_LOADER] = stand_in


def version_line() -> str:
    """`servesim --version`'s line: servesim's version and each engine's newest modelled version."""
    from servesim import __version__
    from servesim.engine.registry import engine_versions_line

    return f"servesim {__version__} (models {engine_versions_line()})"


def _run_plain_or_version() -> None:
    """`--version`, or a plain `servesim run` without typer: either exits; anything else returns."""
    # pydantic looks for third-party plugins through every installed package's entry points
    # on its first validation (~15 ms of start-up); servesim's schema needs none.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    _skip_pydantic_plugin_loader()
    from servesim.cli_run import parse_run_argv, run_command

    if sys.argv[1:] in (["--version"], ["-V"]):   # as the typer group's eager option prints it
        sys.stdout.write(version_line() + "\n")
        sys.exit(0)
    params = parse_run_argv(sys.argv[1:])
    if params is not None:
        sys.exit(run_command(params))


def main() -> None:
    # A plain run's start-up objects are frozen before its cluster is built (startup_gc.py); any
    # other command line runs with the collector as it found it.
    startup_gc.pause()
    try:
        _run_plain_or_version()   # returns for the typer app's command lines
    finally:   # (and after a plain run that stopped before its simulation: nothing to freeze)
        startup_gc.resume(freeze=False)
    from servesim import cli_app
    from servesim.cli_usage import run_app
    from servesim.errors import ServesimError

    argv = cli_app.vb.expand_goodput(cli_app._optional_ray_address(sys.argv[1:]))
    try:
        status = run_app(cli_app.app, argv)  # usage errors: one line, exit 2
    except ServesimError as err:  # raised outside a command, e.g. while parsing options
        sys.stderr.write(f"error: {err}\n")
        status = 2
    sys.exit(status)


if __name__ == "__main__":
    main()
