"""The one exception type users see.

A `ServesimError` carries a single sentence that says what is wrong and, where
it helps, how to fix it. The CLI prints it and exits with status 2; anything
else escaping is a bug and keeps its traceback.
"""


class ServesimError(Exception):
    """A problem with the user's input (config, trace, options)."""

    exit_code = 2
