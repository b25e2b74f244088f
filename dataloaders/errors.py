"""The exceptions for problems that are not bugs, so the CLI can print one line instead of a
traceback.

A training engineer at 3 a.m. needs "which file, what is wrong", not a stack. Anything raised as
a `ForensicsError` is a problem with the input or the machine and is reported as a single red
line with a non-zero exit; anything else is our bug and keeps its traceback. The subclasses say
whose problem it is, for callers that handle them differently:

- `ConfigError`: the run config or the command line (a field, a flag, a value out of range);
- `DataError`: a file the run reads or an output of ours (a damaged .idx, a log with no loss, a
  skip file made for another run);
- `EnvironmentProblem`: the machine (a full disk, a denied path).
"""

from __future__ import annotations

import errno
import os
import re


class ForensicsError(Exception):
    """A user-facing error: the message names the file or argument and the problem, on one line."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


class ConfigError(ForensicsError):
    """The run config or the command line is wrong."""


class DataError(ForensicsError):
    """A data file, log, manifest, cache or skip file is missing, damaged or not this run's."""


# errno values that mean the disk (or a quota, or a file size limit) is full, or a path may not
# be read or written.
_FULL = {"ENOSPC", "EFBIG", "EDQUOT"}
_DENIED = {"EACCES", "EPERM", "EROFS"}


class EnvironmentProblem(ForensicsError):
    """The machine's problem, not the input's nor ours: a full disk or a denied path."""

    @classmethod
    def of(cls, err: BaseException) -> EnvironmentProblem | None:
        """The one-line problem `err` stands for when it is a full disk or a denied path, else
        None. An OSError carries its errno; polars wraps the OS error of a failed write in its
        own ComputeError, whose message is the only place that says "os error N"."""
        code = err.errno if isinstance(err, OSError) else None
        if code is None:
            found = re.search(r"os error (\d+)", str(err))
            code = int(found.group(1)) if found else None
        name = errno.errorcode.get(code, "") if code is not None else ""
        where = f"{err.filename}: " if isinstance(err, OSError) and err.filename else ""
        if name in _FULL:
            return cls(
                f"{where}{os.strerror(code)}: the disk is full (or a quota or file size limit "
                "was reached); free space and rerun. Outputs are published whole, so none was "
                "left half-written"
            )
        if name in _DENIED:
            return cls(
                f"{where}{os.strerror(code)}: check the permissions of that path, or choose another"
            )
        return None
