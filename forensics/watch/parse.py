"""Turn a batch of new log lines into rows of the triage table, with triage's own readers.

No second parser: Megatron lines go through `readers.megatron_raw`, OLMo-core's console log
through `olmo_core_log.olmo_core_raw`, JSONL through `readers.jsonl_rows`, CSV through polars
with the header remembered from the file's start, and every format through
`canonical.canonical_rows` (names, numbers, line-numbered notes), exactly as
`forensics triage` reads a finished log (TensorBoard: see `tbfollow`). A trainer_state.json is
rewritten whole, not appended, and is refused with a pointer to what to watch instead.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import polars as pl

from forensics.errors import ForensicsError
from forensics.triage import canonical, readers
from forensics.triage.olmo_core_log import MARKER_RE, olmo_core_raw

LINE_FORMATS = ("megatron", "olmo-core", "jsonl", "csv", "wandb-csv", "tensorboard")
_MARKER = re.compile(MARKER_RE)


def detect_line_format(path: Path, requested: str) -> str | None:
    """The format to parse new lines with (None: cannot tell yet, e.g. only a preamble so
    far); refuses formats that are not appended line by line."""
    if requested == "auto":
        try:
            fmt = readers.detect_format(path)
        except ForensicsError:
            return None
        if fmt in ("csv", "wandb-csv") and not _has_csv_row(path):
            return None  # one line with a comma: a header, or a trainer's preamble so far
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


def _has_csv_row(path: Path) -> bool:
    """True when a row with as many cells as the first line follows it (a CSV's header and a
    first row, not a preamble line that happens to hold a comma)."""
    with open(path, "rb") as handle:
        head = handle.read(1 << 16).decode("utf-8", errors="replace")
    rows = [ln for ln in head.split("\n")[:-1] if ln.strip() and not ln.startswith("#")]
    return len(rows) >= 2 and rows[1].count(",") == rows[0].count(",")


class ChunkParser:
    """Parses successive batches of (line number, text) of one log into canonical rows."""

    def __init__(self, path: Path, fmt: str, header: str | None = None) -> None:
        self.path = path
        self.fmt = fmt
        # CSV: the header line, from the start of the file. OLMo-core: the newest record's
        # lines (JSON), held until a line after it shows the record is complete.
        self.header = header
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
        elif self.fmt == "olmo-core":
            raw = self._olmo_core(lines)
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

    def _olmo_core(self, lines: list[tuple[int, str]]) -> pl.DataFrame | None:
        """OLMo-core records span lines (a marker, then its metrics), and a checkpoint step logs
        two records: the newest step's records wait until another step's marker arrives."""
        held = [tuple(x) for x in json.loads(self.header)] if self.header else []
        lines = [*held, *lines]
        markers = [(i, m.group(1)) for i, (_, t) in enumerate(lines) if (m := _MARKER.search(t))]
        cut = len(lines)
        for i, step in reversed(markers):
            if step != markers[-1][1]:
                break
            cut = i
        self.header = json.dumps(lines[cut:]) if cut < len(lines) else None
        if cut == 0:
            return None
        frame = pl.DataFrame(
            {"__line": [n for n, _ in lines[:cut]], "text": [t for _, t in lines[:cut]]},
            schema={"__line": pl.Int64, "text": pl.Utf8},
        )
        return olmo_core_raw(frame)

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
