"""Read a training log in any of the formats teams actually have into one polars table.

`read_log(path, format="auto") -> pl.DataFrame` is the public API (the spike report overlays the
loss with it). The table has `step` (Int64, unique, ascending) and whichever of `loss`,
`grad_norm`, `lr`, `loss_scale`, `consumed_samples`, `global_batch_size`, `tokens`, `val_loss`,
`iteration_time_s` and per-domain `loss:<domain>` the log carries (Float64; null = not logged at
that step, NaN = logged as nan). Unknown numeric fields survive under a snake_case name.

One reader per format (`forensics.triage.formats`, one module each), each only turning its
format into raw string/number columns; the shared `canonical.finish` does the rest (names,
numbers with line-numbered warnings, restarts, order), so every format gets the same treatment.
Problems with the input are `ForensicsError` (one line, names the file) or, when the rest of the
log is usable, a warning that names the line.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import polars as pl

from forensics.errors import ForensicsError
from forensics.triage.canonical import finish
from forensics.triage.formats import AUTO, FORMATS, detect_format, directory_formats, get_format

__all__ = ["FORMATS", "LogWarning", "detect_format", "read_log", "read_log_with_warnings"]


class LogWarning(UserWarning):
    """A problem with some lines of a log that still leaves the rest usable."""


def read_log(path: str | os.PathLike[str], format: str = AUTO) -> pl.DataFrame:
    """Read a training log; see the module docstring for the returned columns.

    Line-level problems are emitted as `LogWarning`s (each names the file and the line); use
    `read_log_with_warnings` to get them as a list instead.
    """
    table, notes = read_log_with_warnings(path, format)
    for note in notes:
        warnings.warn(note, LogWarning, stacklevel=2)
    return table


def read_log_with_warnings(
    path: str | os.PathLike[str], format: str = AUTO
) -> tuple[pl.DataFrame, list[str]]:
    """`read_log`, returning the line-level warnings instead of emitting them."""
    p = Path(path)
    if format not in FORMATS:
        raise ForensicsError(f"--format {format}: unknown; choose one of {', '.join(FORMATS)}")
    if not p.exists():
        raise ForensicsError(f"{p}: no such file or directory")
    if p.is_file() and p.stat().st_size == 0:
        raise ForensicsError(f"{p}: the log is empty")
    log_format = get_format(detect_format(p) if format == AUTO else format)
    if p.is_dir() and not log_format.reads_directory:
        raise ForensicsError(
            f"{p}: is a directory; only --format {directory_formats()} reads a directory"
        )
    notes: list[str] = []
    raw, line_of = log_format.read(p, notes)
    return finish(raw, line_of, p, notes), notes
