"""Turn a batch of new log lines into rows of the triage table, with triage's own readers.

No second parser: Megatron lines go through `readers.megatron_raw`, JSONL through
`readers.jsonl_rows`, CSV through polars with the header remembered from the file's start, and
every format through `canonical.canonical_rows` (names, numbers, line-numbered notes), exactly as
`forensics triage` reads a finished log (TensorBoard: see `tbfollow`). A trainer_state.json is
rewritten whole, not appended, and is refused with a pointer to what to watch instead.
"""

from __future__ import annotations

import io
from pathlib import Path

import polars as pl

from forensics.errors import ForensicsError
from forensics.triage import canonical, readers

LINE_FORMATS = ("megatron", "jsonl", "csv", "wandb-csv", "tensorboard")


def detect_line_format(path: Path, requested: str) -> str | None:
    """The format to parse new lines with (None: cannot tell yet, e.g. only a preamble so
    far); refuses formats that are not appended line by line."""
    if requested == "auto":
        try:
            fmt = readers.detect_format(path)
        except ForensicsError:
            return None
    else:
        fmt = requested
    if fmt == "wandb-csv":
        return "csv"
    if fmt not in LINE_FORMATS:
        raise ForensicsError(
            f"{path}: {fmt} is not a log that grows as it trains (it is rewritten whole); watch "
            "the trainer's stdout (Megatron), a JSONL or CSV metrics file, or a TensorBoard run "
            "directory instead"
        )
    return fmt


class ChunkParser:
    """Parses successive batches of (line number, text) of one log into canonical rows."""

    def __init__(self, path: Path, fmt: str, header: str | None = None) -> None:
        self.path = path
        self.fmt = fmt
        self.header = header  # CSV: the header line, from the start of the file
        self.notes: list[str] = []

    def parse(self, lines: list[tuple[int, str]]) -> pl.DataFrame | None:
        """Canonical rows (`step`, `loss`, ..., `__line`) of these lines; None if there are none."""
        if not lines:
            return None
        if self.fmt == "megatron":
            frame = pl.DataFrame(
                {"__line": [n for n, _ in lines], "text": [t for _, t in lines]},
                schema={"__line": pl.Int64, "text": pl.Utf8},
            )
            raw = readers.megatron_raw(frame, self.path, self.notes)
        elif self.fmt == "jsonl":
            rows = readers.jsonl_rows(lines, self.path, self.notes)
            raw = canonical.rows_to_frame(rows) if rows else None
        else:
            raw = self._csv(lines)
        if raw is None or raw.height == 0:
            return None
        try:
            return canonical.canonical_rows(raw, "line", self.path, self.notes)
        except ForensicsError as err:
            self.notes.append(str(err))
            return None

    def _csv(self, lines: list[tuple[int, str]]) -> pl.DataFrame | None:
        body = [(n, t) for n, t in lines if t.strip() and not t.startswith("#")]
        if self.header is None:
            if not body:
                return None
            self.header = body[0][1]
            body = body[1:]
        if not body:
            return None
        text = self.header + "\n" + "\n".join(t for _, t in body) + "\n"
        try:
            raw = pl.read_csv(
                io.BytesIO(text.encode()),
                infer_schema=False,
                truncate_ragged_lines=True,
                encoding="utf8-lossy",
            )
        except pl.exceptions.PolarsError as err:
            self.notes.append(f"{self.path}: lines {body[0][0]}-{body[-1][0]} unreadable: {err}")
            return None
        return raw.with_columns(pl.Series("__line", [n for n, _ in body], dtype=pl.Int64))
