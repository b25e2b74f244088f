"""CSV with a header (`step,loss,...`), `#` comment lines allowed before it; and a W&B CSV
export (`Step`/`_step` plus `<run> - train/loss` columns, `__MIN`/`__MAX` beside them)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import ClassVar

import polars as pl

from forensics.errors import ForensicsError
from forensics.triage.formats.base import Head, LineState, LogFormat
from forensics.triage.formats.text import first_line


def _csv_like(head: Head) -> bool:
    return "," in head.first or head.name.endswith(".csv")


def is_wandb_header(cell: str) -> bool:
    """A header cell only a W&B export writes."""
    return (
        " - " in cell
        or cell.endswith(("__MIN", "__MAX"))
        or cell in {"_step", "_runtime", "_timestamp"}
        or cell.startswith(("trainer/", "train/"))
    )


class CsvLog(LogFormat):
    """A metrics CSV: a header, one row per logged step."""

    name: ClassVar[str] = "csv"
    grows = True
    header_first = True

    def recognises(self, head: Head) -> bool:
        return _csv_like(head)

    def read(self, path: Path, notes: list[str]) -> tuple[pl.DataFrame, str]:
        skipped = 0
        with open(path, encoding="utf-8", errors="replace") as fh:
            for ln in fh:
                if ln.startswith("#") or not ln.strip():
                    skipped += 1
                    continue
                break
        try:
            raw = pl.read_csv(
                path,
                comment_prefix="#",
                infer_schema=False,
                truncate_ragged_lines=True,
                encoding="utf8-lossy",
            )
        except (pl.exceptions.PolarsError, OSError) as err:
            raise ForensicsError(f"{path}: not a readable CSV ({first_line(err)})") from None
        if raw.width == 0 or raw.height == 0:
            raise ForensicsError(f"{path}: the CSV has a header but no rows")
        line = pl.int_range(skipped + 2, skipped + 2 + raw.height, dtype=pl.Int64, eager=True)
        return raw.with_columns(line.alias("__line")), "line"

    def parse_lines(self, lines: list[tuple[int, str]], state: LineState) -> pl.DataFrame | None:
        """New rows, read with the header remembered from the file's start (`state.header`)."""
        body = [(n, t) for n, t in lines if t.strip() and not t.startswith("#")]
        if state.header is None:
            if not body:
                return None
            state.header = body[0][1]
            body = body[1:]
        if not body:
            return None
        text = state.header + "\n" + "\n".join(t for _, t in body) + "\n"
        try:
            raw = pl.read_csv(
                io.BytesIO(text.encode()),
                infer_schema=False,
                truncate_ragged_lines=True,
                encoding="utf8-lossy",
            )
        except pl.exceptions.PolarsError as err:
            state.notes.append(f"{state.path}: lines {body[0][0]}-{body[-1][0]} unreadable: {err}")
            return None
        return raw.with_columns(pl.Series("__line", [n for n, _ in body], dtype=pl.Int64))


class WandbCsvLog(LogFormat):
    """A W&B CSV export of one run (a file of several runs reads the first column of each
    metric, with a warning)."""

    name: ClassVar[str] = "wandb-csv"
    grows = True
    header_first = True

    def recognises(self, head: Head) -> bool:
        cells = [c.strip().strip('"') for c in head.first.split(",")]
        return _csv_like(head) and any(is_wandb_header(c) for c in cells)

    def watched_as(self) -> LogFormat:
        return CsvLog()

    def read(self, path: Path, notes: list[str]) -> tuple[pl.DataFrame, str]:
        raw, unit = CsvLog().read(path, notes)
        keep, seen_runs = {}, set()
        for col in raw.columns:
            if col.endswith(("__MIN", "__MAX")) or col in {"_runtime", "_timestamp"}:
                continue
            name = col
            if " - " in col:
                run, name = col.rsplit(" - ", 1)
                seen_runs.add(run)
            if name in keep.values():
                continue
            keep[col] = name
        if len(seen_runs) > 1:
            notes.append(
                f"{path}: the export holds {len(seen_runs)} runs; reading the first column of "
                "each metric (export one run per file to triage each)"
            )
        raw = raw.select(list(keep)).rename(keep)
        # W&B's own `_step` counts log calls; the trainer's step wins when it was logged.
        for pref in ("trainer/global_step", "train/global_step", "global_step", "Step", "step"):
            if pref in raw.columns:
                raw = raw.drop([c for c in ("_step",) if c in raw.columns and c != pref])
                break
        return raw, unit
