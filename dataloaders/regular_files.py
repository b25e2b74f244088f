"""What a command may read without blocking: a regular file or a directory, never a FIFO, a
device or a socket.

A FIFO nobody writes to blocks `open()` until a writer comes (forever), a character device such
as /dev/zero never ends, and a socket is not a file. Every input is `stat`'ed first
(`check_input_path`; no open) and anything but a regular file or a directory is refused in one
line naming the path; a file a command keeps following (`forensics watch`'s log, which may appear
later) is opened by `open_regular`, which opens without blocking and refuses what `fstat` says is
not a regular file. It sits in the bottom layer because readers of the run's own files (the
launch-argument files of a Megatron job) check their inputs too.
"""

from __future__ import annotations

import os
import stat
from typing import IO

from dataloaders.errors import ForensicsError

_SPECIAL = (
    (stat.S_ISFIFO, "a FIFO or pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def special_kind(mode: int) -> str | None:
    """What a file of this `st_mode` is when it is neither a regular file nor a directory."""
    for test, kind in _SPECIAL:
        if test(mode):
            return kind
    return None


def _refusal(path: str | os.PathLike[str], kind: str, label: str) -> ForensicsError:
    where = f"{label} {path}" if label else str(path)
    if kind == "a directory":
        return ForensicsError(f"{where}: is a directory, not a file")
    return ForensicsError(
        f"{where}: is {kind}, not a regular file; forensics reads and writes regular files "
        "only (opening it could block or never end; save a stream to a file first)"
    )


def check_input_path(path: str | os.PathLike[str], label: str = "") -> None:
    """Refuse `path` when it exists and is a FIFO, a device or a socket (found by `stat`, which
    never blocks; a symlink is followed, so /dev/stdin on a pipe is refused too). A missing path
    is left to the reader, which says so in its own words."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return
    kind = special_kind(mode)
    if kind is not None:
        raise _refusal(path, kind, label)


def open_regular(path: str | os.PathLike[str], label: str = "") -> IO[bytes]:
    """`open(path, "rb")` that never blocks: opened with O_NONBLOCK (a FIFO then opens at
    once), checked with `fstat` on that very file (no race with a rename in between), refused
    when not a regular file, and only then switched back to blocking reads."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        kind = special_kind(mode) or ("a directory" if stat.S_ISDIR(mode) else None)
        if kind is not None:
            raise _refusal(path, kind, label)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
