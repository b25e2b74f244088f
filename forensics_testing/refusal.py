"""Assertions for refusals: a bad input must end in ONE line naming the problem (exit 2), not
merely in a non-zero exit: a traceback exits non-zero too."""

from __future__ import annotations

import subprocess
from typing import Any

from forensics.errors import ForensicsError


def one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """`proc` (the CLI in a subprocess) refused with one `error:` line on stderr holding every
    needle: exit 2, no traceback, no internal error. Returns the line."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def refused(result: Any, *needles: str) -> str:
    """A typer CliRunner result whose command raised a one-line ForensicsError holding every
    needle (CliRunner does not go through forensics.cli.main, so the error is the exception;
    any other exception is a bug and fails here). Returns the message."""
    err = result.exception
    assert isinstance(err, ForensicsError), (type(err), err, result.output[-2000:])
    message = str(err)
    assert message and "\n" not in message.strip(), message
    for needle in needles:
        assert needle in message, (needle, message)
    return message
