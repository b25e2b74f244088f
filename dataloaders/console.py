"""The console factory: every rich Console the tool prints through (the commands, the summaries,
the replayers' progress bars) comes from `make_console`, so they all treat a pipe the same way.

Everything printed carries names the tool does not control: curve names from a log
(`loss/:book:`), document and dataset names, paths. rich would turn `:book:` into an emoji and
highlight numbers in them, so emoji and highlighting are off here; markup stays on for our own
fixed strings, and callers pass every name through `rich.markup.escape`."""

from __future__ import annotations

import os
import sys

from rich.console import Console

PIPE_WIDTH = 120  # columns when the output is a file or a CI log (rich would assume 80)


def make_console(*, stderr: bool = False, soft_wrap: bool = False) -> Console:
    """A rich Console that does not wrap at 80 columns when piped into a file or a CI log, and
    never highlights numbers or names on its own.

    rich uses the terminal's width, else $COLUMNS, else 80; 80 wraps the summary's lines in
    the middle of numbers. Off a terminal and without $COLUMNS we use PIPE_WIDTH instead; a set
    $COLUMNS still wins, and a real terminal keeps its own width.
    """
    stream = sys.stderr if stderr else sys.stdout
    isatty = getattr(stream, "isatty", None)
    on_terminal = bool(isatty and isatty())
    width = None if on_terminal or os.environ.get("COLUMNS") else PIPE_WIDTH
    return Console(stderr=stderr, highlight=False, emoji=False, width=width, soft_wrap=soft_wrap)
