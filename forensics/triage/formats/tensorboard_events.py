"""TensorBoard event files (a file or a run directory), every record's CRCs checked
(`tfrecord.iter_records`; tensorboard's own loader stops at the first bad one).

Megatron's `... vs samples` / `vs tokens` tags are skipped (their step is not the iteration).
A truncated last record (a run killed mid-write) is reported and the records before it kept.
`forensics watch` follows the event records as they are appended (`forensics.watch.tbfollow`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar

import polars as pl

from forensics.errors import ForensicsError
from forensics.triage.formats.base import Head, LogFormat
from forensics.triage.tfrecord import RecordScan, iter_records


def event_files(path: Path) -> list[Path]:
    """The event files under a run directory, by path."""
    return sorted(p for p in path.rglob("*tfevents*") if p.is_file())


def looks_like_tfrecord(head: bytes) -> bool:
    """A TFRecord starts with an 8-byte length whose record fits; text never looks like that."""
    if len(head) < 16:
        return False
    (length,) = struct.unpack("<Q", head[:8])
    return 0 < length < (1 << 24) and not head[:8].isascii()


class TensorBoardLog(LogFormat):
    """TensorBoard's scalar summaries, one row per step."""

    name: ClassVar[str] = "tensorboard"
    reads_directory = True
    grows = True
    follows_events = True

    def named(self, name: str) -> bool:
        return "tfevents" in name

    def recognises(self, head: Head) -> bool:
        return looks_like_tfrecord(head.data)

    def holds_directory(self, path: Path) -> bool:
        return bool(event_files(path))

    def read(self, path: Path, notes: list[str]) -> tuple[pl.DataFrame, str]:
        files = event_files(path) if path.is_dir() else [path]
        points: list[tuple[int, str, float]] = []
        for f in files:
            scan = RecordScan()
            points += event_scalars(iter_records(f, scan), scan)
            notes.extend(scan_notes(f, scan))
        if not points:
            raise ForensicsError(
                f"{path}: no scalar summaries found in the TensorBoard event file(s)"
            )
        return scalars_to_raw(points), "step"


def event_scalars(records: Iterable[bytes], scan: RecordScan) -> list[tuple[int, str, float]]:
    """(step, tag, value) of every scalar in these event records; records that are not events
    are counted in `scan.not_events`."""
    from tensorboard.compat.proto import event_pb2

    out: list[tuple[int, str, float]] = []
    for rec in records:
        try:
            event = event_pb2.Event.FromString(rec)
        except Exception:  # noqa: BLE001 - a record that is not an event: count it
            scan.not_events += 1
            continue
        for v in event.summary.value:
            if v.tag.endswith((" vs samples", " vs tokens", " vs steps")):
                continue
            if v.HasField("simple_value"):
                val = float(v.simple_value)
            elif v.tensor.float_val:
                val = float(v.tensor.float_val[0])
            elif v.tensor.double_val:
                val = float(v.tensor.double_val[0])
            else:
                continue
            out.append((event.step, v.tag, val))
    return out


def scan_notes(f: Path, scan: RecordScan) -> list[str]:
    """What reading one event file skipped, as warnings."""
    notes = []
    if scan.truncated_at is not None:
        notes.append(
            f"{f}: truncated TensorBoard record at byte {scan.truncated_at} (after "
            f"{scan.good + scan.unreadable} records); using the records before it"
        )
    if scan.unreadable or scan.not_events:
        at = f"; first at byte {scan.first_bad_offset}" if scan.first_bad_offset is not None else ""
        notes.append(
            f"{f}: {scan.unreadable + scan.not_events} unreadable records skipped "
            f"({scan.bad_data_crc} failed the data CRC, {scan.bad_header_crc} the length CRC "
            f"({scan.skipped_bytes} bytes skipped to the next good record), {scan.not_events} "
            f"not events{at}); {scan.good} records read: the file is corrupt, the points in "
            "those records are missing"
        )
    return notes


def scalars_to_raw(points: list[tuple[int, str, float]]) -> pl.DataFrame:
    """Long (step, tag, value) points -> one row per step, one column per tag (last wins)."""
    long = pl.DataFrame(
        points, schema={"__line": pl.Int64, "tag": pl.Utf8, "value": pl.Float64}, orient="row"
    )
    raw = long.pivot(on="tag", index="__line", values="value", aggregate_function="last")
    return raw.with_columns(pl.col("__line").alias("step")).sort("__line")
