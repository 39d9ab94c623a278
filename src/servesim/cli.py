"""The `servesim` command line's entry point (`main`); the commands are typer's, in cli_app.py.

A plain `servesim run` command line (cli_run.py says which) runs without typer, whose start-up
and parameter adapters are a large part of a short run; every other command line goes through
the typer app.
"""

from __future__ import annotations

import os
import sys

# Names that lived here before the commands moved to cli_app.py (`from servesim.cli import app`).
_APP_NAMES = ("app", "RAY_LOCAL", "_optional_ray_address", "_fail")


def __getattr__(name: str):
    if name in _APP_NAMES:
        from servesim import cli_app

        return getattr(cli_app, name)
    raise AttributeError(f"module 'servesim.cli' has no attribute {name!r}")


def main() -> None:
    # pydantic looks for third-party plugins through every installed package's entry points
    # on its first validation (~15 ms of start-up); servesim's schema needs none.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from servesim.cli_run import parse_run_argv, run_command

    params = parse_run_argv(sys.argv[1:])
    if params is not None:
        sys.exit(run_command(params))
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
