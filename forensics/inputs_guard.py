"""What a command may read, checked before it is opened, and did it change while it was read?

No blocking open: every file a run config names goes through `check_run_inputs`, the stat-only
check of `dataloaders.regular_files` (which says why a FIFO, a device or a socket is refused);
the command line's paths go through that check in one place (`forensics.cli`).

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
from pathlib import Path
from typing import Any

from dataloaders.regular_files import check_input_path
from forensics.errors import ForensicsError
from forensics.outputs import run_inputs

Stats = dict[str, tuple[int, int, int]]


def check_run_inputs(config: Any) -> None:
    """`check_input_path` on every file a run config names (its data, manifests, tokenizer)."""
    for path in run_inputs(config):
        check_input_path(path)


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
