"""One exception type for user mistakes, so the CLI can print one line instead of a traceback.

A training engineer at 3 a.m. needs "which file, what is wrong", not a stack. Anything raised as
`ForensicsError` is a problem with the input (config, data files, arguments) and is reported as a
single red line with a non-zero exit; anything else is our bug and keeps its traceback.
"""

from __future__ import annotations


class ForensicsError(Exception):
    """A user-facing error: the message names the file or argument and the problem, on one line."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))
