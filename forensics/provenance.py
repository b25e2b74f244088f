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
    if argv:  # `python -m forensics.cli` and the entry point both read as `forensics`
        name = argv[0].rsplit("/", 1)[-1]
        argv[0] = "forensics" if name.endswith(".py") else name
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


def provenance_line(stamp: dict[str, Any] | None) -> str:
    """One line for a report's head: "run R, forensics V, written T: COMMAND" ("" without)."""
    if not stamp:
        return ""
    run = f"run {stamp['run']}, " if stamp.get("run") else ""
    tool = f"{stamp['tool']} {stamp['version']}"
    return f"{run}{tool}, written {stamp['written_at']}: {stamp['command']}"
