"""Who wrote an output, when, and from what command: stamped into every file a command writes, so
a report or skip list found in a directory months later says where it came from."""

from __future__ import annotations

import shlex
import sys
import time
from typing import Any


def tool_version() -> str:
    """The installed forensics version ("unknown" when run from a bare checkout)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("forensics")
    except PackageNotFoundError:
        return "unknown"


def command_line() -> str:
    """The command as typed (argv[0] shortened to its name), quoted so it can be rerun."""
    argv = list(sys.argv)
    if argv:
        argv[0] = argv[0].rsplit("/", 1)[-1]
    return shlex.join(argv)


def provenance(run_name: str | None = None) -> dict[str, Any]:
    """name (the run's), tool and version, UTC timestamp, and the command line."""
    return {
        "run": run_name,
        "tool": "forensics",
        "version": tool_version(),
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": command_line(),
    }
