"""Follow a TensorBoard run directory (or one event file) as the trainer appends records.

Each event file is read from where the last poll stopped (`tfrecord.iter_records` with a start
offset, every CRC checked); a record still being written is left for the next poll; a new event
file (a restarted job writes one) is picked up from its start; a file that shrank is read again
from its start. The "lines" handed to the watcher are (step, (tag, value)) points, which
`TensorBoardParser` turns into rows with triage's own `scalars_to_raw` and `canonical_rows`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from forensics.errors import ForensicsError
from forensics.triage import canonical
from forensics.triage.formats.tensorboard_events import event_scalars, scalars_to_raw, scan_notes
from forensics.triage.tfrecord import RecordScan, iter_records


@dataclass
class TBPosition:
    """Byte offset reached in each event file; `line_no` counts the points read."""

    offsets: dict[str, int] = field(default_factory=dict)
    line_no: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"offsets": dict(self.offsets), "line_no": self.line_no}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TBPosition:
        return cls(offsets={str(k): int(v) for k, v in d.get("offsets", {}).items()},
                   line_no=int(d.get("line_no", 0)))  # fmt: skip


class TensorBoardFollower:
    """New scalar points of a run directory's event files since the last poll."""

    def __init__(self, path: Path, position: TBPosition | None = None) -> None:
        self.path = path
        self.pos = position or TBPosition()
        self.notes: list[str] = []
        self.bytes_read = 0

    def _files(self) -> list[Path]:
        if self.path.is_dir():
            return sorted(p for p in self.path.rglob("*tfevents*") if p.is_file())
        return [self.path] if self.path.exists() else []

    def poll(self) -> list[list[tuple[int, Any]]]:
        """New (step, (tag, value)) points, one batch per event file."""
        batches: list[list[tuple[int, Any]]] = []
        for f in self._files():
            key = str(f)
            start = self.pos.offsets.get(key, 0)
            size = f.stat().st_size
            if size < start:
                self.notes.append(f"{f}: shrank from {start} to {size} bytes; reading it again")
                start = 0
            if size == start:
                continue
            scan = RecordScan()
            new = event_scalars(iter_records(f, scan, start), scan)
            self.bytes_read += scan.end - start
            self.pos.offsets[key] = scan.end
            scan.truncated_at = None  # a record being written: read again next poll, no warning
            self.notes.extend(scan_notes(f, scan))
            if new:
                batches.append([(step, (tag, value)) for step, tag, value in new])
                self.pos.line_no += len(new)
        return batches

    def close(self) -> None:
        pass


class TensorBoardParser:
    """(step, (tag, value)) points -> canonical rows, as `read_log` makes them."""

    header = None

    def __init__(self, path: Path) -> None:
        self.path = path
        self.notes: list[str] = []

    def parse(self, points: list[tuple[int, Any]]) -> pl.DataFrame | None:
        if not points:
            return None
        raw = scalars_to_raw([(s, t, v) for s, (t, v) in points])
        try:
            return canonical.canonical_rows(raw, "step", self.path, self.notes)
        except ForensicsError as err:
            self.notes.append(str(err))
            return None
