"""What a command may read, checked before it is opened, and did it change while it was read?

No blocking open: a FIFO nobody writes to blocks `open()` until a writer comes (forever), a
character device such as /dev/zero never ends, and a socket is not a file. Every input is
`stat`'ed first (`check_input_path`; no open) and anything but a regular file or a directory is
refused in one line naming the path. The command line's paths go through it in one place
(`forensics.cli`), the files a run config names through `check_run_inputs`, and a file a command
keeps following (`forensics watch`'s log, which may appear later) is opened by `open_regular`,
which opens without blocking and refuses what `fstat` says is not a regular file.

Unchanged while read:

A spike reads the data several times (replay, decode, the forward exposure, the report's
snippets); a data file rewritten in between gives a result that mixes the old files and the new
ones, and a fingerprint taken once describes only one of them. Each file the config points at is
stat'ed (size, modification time, inode) when the command starts and again before it publishes;
any difference is refused, naming the file, and nothing is written. The training log is left
out (it grows while the run trains), and so are directories (a checkpoint folder gains entries).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO, Any

from forensics.errors import ForensicsError
from forensics.outputs import run_inputs

Stats = dict[str, tuple[int, int, int]]

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


def check_run_inputs(config: Any) -> None:
    """`check_input_path` on every file a run config names (its data, manifests, tokenizer)."""
    for path in run_inputs(config):
        check_input_path(path)


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


def input_stats(config: Any) -> Stats:
    """(size, mtime_ns, inode) of every data file, manifest and tokenizer the config names."""
    log = getattr(config, "log", None)
    out: Stats = {}
    for path in run_inputs(config):
        if log is not None and Path(path) == Path(log):
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue  # a missing optional file: the readers say so themselves
        if not os.path.isdir(path):
            out[str(path)] = (st.st_size, st.st_mtime_ns, st.st_ino)
    return out


def check_unchanged(config: Any, before: Stats, command: str) -> None:
    """Refuse in one line when a file of `before` changed, vanished or appeared since."""
    after = input_stats(config)
    for path in sorted(set(before) | set(after)):
        if before.get(path) != after.get(path):
            what = "was removed" if path not in after else "changed"
            raise ForensicsError(
                f"{path}: {what} while forensics {command} ran: its result would mix the old "
                "data and the new; nothing was written, rerun it once the data is settled"
            )
