"""A non-blocking exclusive lock on a file: how a command that writes a folder tells whether
another is writing it (forensics.outputs, forensics.publish_set)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def try_lock(path: Path) -> Any:
    """The open, exclusively locked file `path`, or None when another holds it."""
    import fcntl

    handle = open(path, "a+")  # noqa: SIM115 - held until released
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle
