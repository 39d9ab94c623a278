"""How the command line speaks when it is used wrongly: one line, `error: ...`, exit 2.

typer (through click) reports a usage error (an unknown option, a missing argument, a
value of the wrong type) as a usage line, a hint and a boxed panel over several lines;
servesim reports every bad input as one sentence on stderr, so `run_app` runs the app in
click's non-standalone mode and prints click's own message as that sentence.

typer 0.2x also shows a `<bool>` placeholder after every on/off flag in `--help`
(`--quiet -q <bool>`), which reads as if the flag took a value; `show_flags_plainly`
makes such flags show no placeholder, as plain click and older typer versions do.
"""

from __future__ import annotations

import re
import sys
from typing import Any, Sequence


def _click_exceptions():
    """click's exception classes: typer >= 0.2x vendors click as typer._click."""
    try:
        from typer._click import exceptions
    except ImportError:
        from click import exceptions
    return exceptions


def usage_sentence(err: Any) -> str:
    """click's message for a usage error, on one line, with where to find the help."""
    message = " ".join(err.format_message().split())
    message = re.sub(r"\.$", "", message)
    ctx = getattr(err, "ctx", None)
    if ctx is not None:
        message += f" (see {ctx.command_path} --help)"
    return message


def run_app(app, argv: Sequence[str]) -> int:
    """Run the typer `app` on `argv`; return the exit status (usage errors: one line, 2)."""
    import typer

    exceptions = _click_exceptions()
    try:
        status = app(args=list(argv), standalone_mode=False)
    except exceptions.NoArgsIsHelpError as err:
        # Newer click raises this after (vendored) or instead of (click 8.2) printing the help.
        text = err.format_message()
        if text.strip():
            sys.stdout.write(text.rstrip("\n") + "\n")
        return err.exit_code
    except exceptions.ClickException as err:
        sys.stderr.write(f"error: {usage_sentence(err)}\n")
        return 2 if isinstance(err, exceptions.UsageError) else err.exit_code
    except typer.Abort:
        sys.stderr.write("interrupted\n")
        return 130
    return status if isinstance(status, int) else 0


def show_flags_plainly() -> None:
    """Show on/off flags in `--help` without a value placeholder (idempotent)."""
    try:
        from typer.core import TyperOption
    except ImportError:  # pragma: no cover - a typer without it has nothing to mend
        return
    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None or getattr(shown, "_servesim_plain_flags", False):
        return

    def display_type_rich(self, ctx):
        if getattr(self, "is_flag", False) and not getattr(self, "count", False):
            return None
        return shown(self, ctx)

    display_type_rich._servesim_plain_flags = True
    TyperOption.display_type_rich = display_type_rich
