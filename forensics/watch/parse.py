"""Turn a batch of new log lines into rows of the triage table, with triage's own readers.

No second parser: each line format's `LogFormat.parse_lines` (`forensics.triage.formats`) reads
the new lines with the same code `forensics triage` reads a finished log with (a CSV with the
header remembered from the file's start, OLMo-core's records held until they are complete), and
every format goes through `canonical.canonical_rows` (names, numbers, line-numbered notes)
(TensorBoard: see `tbfollow`). A log rewritten whole (a trainer_state.json) is refused with a
pointer to what to watch instead.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from dataloaders.regular_files import open_regular
from forensics.errors import ForensicsError
from forensics.triage import canonical
from forensics.triage.formats import AUTO, REGISTRY, LineState, detect_format, get_format


def detect_line_format(path: Path, requested: str) -> str | None:
    """The format to parse new lines with (None: cannot tell yet, e.g. only a preamble so
    far); refuses formats that are not appended line by line."""
    if requested == AUTO:
        try:
            fmt = detect_format(path)
        except ForensicsError:
            return None
        if REGISTRY[fmt].header_first and not _has_csv_row(path):
            return None  # one line with a comma: a header, or a trainer's preamble so far
    else:
        fmt = requested
    log_format = REGISTRY.get(fmt)
    if log_format is None or not log_format.grows:
        raise ForensicsError(
            f"{path}: {fmt} is not a log that grows as it trains (it is rewritten whole); watch "
            "the trainer's stdout (Megatron), a JSONL or CSV metrics file, or a TensorBoard run "
            "directory instead"
        )
    return log_format.watched_as().name


def _has_csv_row(path: Path) -> bool:
    """True when a row with as many cells as the first line follows it (a CSV's header and a
    first row, not a preamble line that happens to hold a comma)."""
    with open_regular(path) as handle:
        head = handle.read(1 << 16).decode("utf-8", errors="replace")
    rows = [ln for ln in head.split("\n")[:-1] if ln.strip() and not ln.startswith("#")]
    return len(rows) >= 2 and rows[1].count(",") == rows[0].count(",")


class ChunkParser:
    """Parses successive batches of (line number, text) of one log into canonical rows."""

    def __init__(self, path: Path, fmt: str, header: str | None = None) -> None:
        self.path = path
        self.fmt = fmt
        self.format = get_format(fmt)
        self.state = LineState(path, header=header)

    @property
    def header(self) -> str | None:
        """What the format holds back between batches (`LineState.header`), saved with the
        watch state."""
        return self.state.header

    @property
    def notes(self) -> list[str]:
        return self.state.notes

    def parse(self, lines: list[tuple[int, str]]) -> pl.DataFrame | None:
        """Canonical rows (`step`, `loss`, ..., `__line`) of these lines; None if there are none."""
        if not lines:
            return None
        raw = self.format.parse_lines(lines, self.state)
        if raw is None or raw.height == 0:
            return None
        try:
            return canonical.canonical_rows(raw, "line", self.path, self.notes)
        except ForensicsError as err:
            self.notes.append(str(err))
            return None
