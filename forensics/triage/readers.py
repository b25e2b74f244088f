"""Read a training log in any of the formats teams actually have into one polars table.

`read_log(path, format="auto") -> pl.DataFrame` is the public API (the spike report overlays the
loss with it). The table has `step` (Int64, unique, ascending) and whichever of `loss`,
`grad_norm`, `lr`, `loss_scale`, `consumed_samples`, `global_batch_size`, `tokens`, `val_loss`,
`iteration_time_s` and per-domain `loss:<domain>` the log carries (Float64; null = not logged at
that step, NaN = logged as nan). Unknown numeric fields survive under a snake_case name.

One reader per format, each only turning its format into raw string/number columns; the shared
`canonical.finish` does the rest (names, numbers with line-numbered warnings, restarts, order), so
every format gets the same treatment. Problems with the input are `ForensicsError` (one line, names
the file) or, when the rest of the log is usable, a warning that names the line.
"""

from __future__ import annotations

import json
import os
import re
import struct
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from forensics.errors import ForensicsError
from forensics.triage.canonical import MAX_WARNINGS_SHOWN, finish, rows_to_frame
from forensics.triage.olmo_core_log import (
    is_olmo_core_log,
    looks_like_olmo_core,
    olmo_core_raw,
)

if TYPE_CHECKING:
    from forensics.triage.tfrecord import RecordScan

FORMATS = (
    "auto",
    "megatron",
    "olmo-core",
    "tensorboard",
    "wandb-csv",
    "jsonl",
    "csv",
    "hf-trainer-state",
)

# ` iteration    31219/  115311 |` (launcher prefixes and timestamps before it are ignored).
_ITER_RE = r"iteration\s+(\d+)\s*/\s*\d+"
_VALID_RE = r"validation loss at iteration\s+(\d+)"


class LogWarning(UserWarning):
    """A problem with some lines of a log that still leaves the rest usable."""


def read_log(path: str | os.PathLike[str], format: str = "auto") -> pl.DataFrame:
    """Read a training log; see the module docstring for the returned columns.

    Line-level problems are emitted as `LogWarning`s (each names the file and the line); use
    `read_log_with_warnings` to get them as a list instead.
    """
    table, notes = read_log_with_warnings(path, format)
    for note in notes:
        warnings.warn(note, LogWarning, stacklevel=2)
    return table


def read_log_with_warnings(
    path: str | os.PathLike[str], format: str = "auto"
) -> tuple[pl.DataFrame, list[str]]:
    """`read_log`, returning the line-level warnings instead of emitting them."""
    p = Path(path)
    if format not in FORMATS:
        raise ForensicsError(f"--format {format}: unknown; choose one of {', '.join(FORMATS)}")
    if not p.exists():
        raise ForensicsError(f"{p}: no such file or directory")
    if p.is_file() and p.stat().st_size == 0:
        raise ForensicsError(f"{p}: the log is empty")
    fmt = detect_format(p) if format == "auto" else format
    if p.is_dir() and fmt != "tensorboard":
        raise ForensicsError(f"{p}: is a directory; only --format tensorboard reads a directory")
    notes: list[str] = []
    raw, line_of = _READERS[fmt](p, notes)
    return finish(raw, line_of, p, notes), notes


# --------------------------------------------------------------------------- format detection


def detect_format(path: Path) -> str:
    """Guess the format from the name, then from the first few MB of content."""
    if path.is_dir():
        if _event_files(path):
            return "tensorboard"
        raise ForensicsError(f"{path}: directory without TensorBoard event files (*tfevents*)")
    name = path.name.lower()
    if "tfevents" in name:
        return "tensorboard"
    if name.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    with open(path, "rb") as fh:
        head_bytes = fh.read(4 << 20)
    if _looks_like_tfrecord(head_bytes):
        return "tensorboard"
    head = head_bytes.decode("utf-8", errors="replace")
    if head.lstrip().startswith("{") and '"log_history"' in head:
        return "hf-trainer-state"
    if re.search(_ITER_RE, head):
        return "megatron"
    if looks_like_olmo_core(head):
        return "olmo-core"
    if is_olmo_core_log(head):
        raise ForensicsError(
            f"{path}: an OLMo-core log without a '[step=N/M,epoch=E]' metrics record yet"
        )
    first = next((ln for ln in head.splitlines() if ln.strip() and not ln.startswith("#")), "")
    if first.lstrip().startswith("{"):
        return "jsonl"
    if "," in first or name.endswith(".csv"):
        cells = [c.strip().strip('"') for c in first.split(",")]
        if any(_is_wandb_header(c) for c in cells):
            return "wandb-csv"
        return "csv"
    raise ForensicsError(
        f"{path}: cannot tell the log format (no Megatron 'iteration N/M' lines, no CSV/JSON "
        "header); pass --format"
    )


def _is_wandb_header(cell: str) -> bool:
    return (
        " - " in cell
        or cell.endswith(("__MIN", "__MAX"))
        or cell in {"_step", "_runtime", "_timestamp"}
        or cell.startswith(("trainer/", "train/"))
    )


def _looks_like_tfrecord(head: bytes) -> bool:
    """A TFRecord starts with an 8-byte length whose record fits; text never looks like that."""
    if len(head) < 16:
        return False
    (length,) = struct.unpack("<Q", head[:8])
    return 0 < length < (1 << 24) and not head[:8].isascii()


# --------------------------------------------------------------------------- one reader per format

# Each reader returns (raw table, unit): the raw table has the original field names (strings or
# numbers) and a `__line` column saying where each row came from; `unit` names what `__line`
# counts ("line", "log_history entry", "step") in warnings.
Reader = Callable[[Path, list[str]], tuple[pl.DataFrame, str]]


def _read_text(path: Path) -> list[str]:
    return path.read_bytes().decode("utf-8", errors="replace").split("\n")


def _read_lines(path: Path) -> pl.DataFrame:
    """Every line of a text file as a `text` column, blank lines kept (line numbers stay right);
    polars' multi-threaded reader, ~3x faster than str.split on a 300 MB log."""
    try:
        return pl.read_csv(
            path,
            has_header=False,
            separator="\x1f",
            quote_char=None,
            new_columns=["text"],
            infer_schema=False,
            truncate_ragged_lines=True,
            encoding="utf8-lossy",
        ).select(pl.col("text").fill_null(""))
    except pl.exceptions.PolarsError:
        return pl.DataFrame({"text": _read_text(path)})


def read_megatron(path: Path, notes: list[str]) -> tuple[pl.DataFrame, str]:
    """Megatron-LM / Megatron-DeepSpeed stdout: `key: value` fields between `|` separators.

    Fields are split generically (not one regex per known field), so fields we have never seen
    survive; `[default7]:` launcher prefixes and timestamps before `iteration` are ignored.
    """
    lines = _read_lines(path).with_row_index("__line", offset=1)
    raw = megatron_raw(lines.with_columns(pl.col("__line").cast(pl.Int64)), path, notes)
    if raw is None:
        raise ForensicsError(f"{path}: no Megatron 'iteration N/M | ...' lines found")
    return raw, "line"


def megatron_raw(lines: pl.DataFrame, path: Path, notes: list[str]) -> pl.DataFrame | None:
    """Megatron lines (`text`, `__line` columns) -> raw fields; None when none is a training
    line. `forensics watch` calls this on each batch of new lines."""
    train = lines.filter(
        pl.col("text").str.contains(_ITER_RE) & ~pl.col("text").str.contains(_VALID_RE)
    )
    if train.height == 0:
        return None
    # From `iteration N/M` on (a logger prefix may hold `|` too), then after its first `|`.
    tail = pl.col("text").str.slice(pl.col("text").str.find(_ITER_RE))
    train = train.select(
        "__line",
        pl.col("text").str.extract(_ITER_RE, 1).alias("iteration"),
        tail.str.slice(tail.str.find("|", literal=True) + 1).fill_null("").alias("rest"),
    )
    # Lines share a handful of layouts (the sequence of keys, values blanked out). Within a
    # layout every value sits at a known position between `|`s: one split, then a slice per
    # field, ~5x faster than a capture-group regex or exploding every field of every line.
    train = train.with_columns(pl.col("rest").str.replace_all(r":[^|]*", ":").alias("layout"))
    parts = []
    for (layout,), group in train.group_by(["layout"], maintain_order=True):
        segs = [seg.strip() for seg in layout.split("|")]
        cells = group.select(pl.col("rest").str.split("|").alias("c"))
        exprs, seen = [], set()
        for i, seg in enumerate(segs):
            key = seg[:-1].strip() if seg.endswith(":") else ""
            if not key or key in seen or key in {"__line", "iteration"}:
                continue
            seen.add(key)
            cell = pl.col("c").list.get(i, null_on_oob=True)
            exprs.append(cell.str.slice(cell.str.find(":", literal=True) + 1).alias(key))
        values = cells.select(exprs) if exprs else pl.DataFrame()
        parts.append(pl.concat([group.select("__line", "iteration"), values], how="horizontal"))
        if segs and segs[-1] and not segs[-1].endswith(":"):
            first = group["__line"].head(3).to_list()
            notes.append(
                f"{path}: {group.height} lines cut off mid-field (e.g. line "
                f"{', '.join(map(str, first))}: ends in {segs[-1][:30]!r}); read what they hold"
            )
    raw = pl.concat(parts, how="diagonal").sort("__line")
    valid = lines.filter(pl.col("text").str.contains(_VALID_RE)).select(
        pl.col("text").str.extract(_VALID_RE, 1).cast(pl.Int64).alias("__vstep"),
        pl.col("text").str.extract(r"lm loss value:\s*([^|\s]+)").alias("validation loss"),
    )
    if valid.height:
        raw = raw.with_columns(pl.col("iteration").cast(pl.Int64).alias("__vstep"))
        valid = valid.unique("__vstep", keep="last")
        raw = raw.join(valid, on="__vstep", how="left").drop("__vstep")
    return raw


def read_olmo_core(path: Path, notes: list[str]) -> tuple[pl.DataFrame, str]:
    """OLMo-core's console log: a `[step=N/M,epoch=E]` marker, then `    name=value` metric
    lines (forensics/triage/olmo_core_log.py cites the library's format)."""
    lines = _read_lines(path).with_row_index("__line", offset=1)
    raw = olmo_core_raw(lines.with_columns(pl.col("__line").cast(pl.Int64)))
    if raw is None:
        raise ForensicsError(f"{path}: no OLMo-core '[step=N/M,epoch=E]' records with metrics")
    return raw, "line"


def read_csv(path: Path, notes: list[str]) -> tuple[pl.DataFrame, str]:
    """CSV with a header (`step,loss,...`), `#` comment lines allowed before it."""
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
        raise ForensicsError(f"{path}: not a readable CSV ({_first_line(err)})") from None
    if raw.width == 0 or raw.height == 0:
        raise ForensicsError(f"{path}: the CSV has a header but no rows")
    line = pl.int_range(skipped + 2, skipped + 2 + raw.height, dtype=pl.Int64, eager=True)
    return raw.with_columns(line.alias("__line")), "line"


def read_wandb_csv(path: Path, notes: list[str]) -> tuple[pl.DataFrame, str]:
    """A W&B CSV export: `Step`/`_step` plus `<run> - train/loss` (and `__MIN`/`__MAX`) columns."""
    raw, unit = read_csv(path, notes)
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
            f"{path}: the export holds {len(seen_runs)} runs; reading the first column of each "
            "metric (export one run per file to triage each)"
        )
    raw = raw.select(list(keep)).rename(keep)
    # W&B's own `_step` counts log calls; the trainer's step wins when it was logged.
    for pref in ("trainer/global_step", "train/global_step", "global_step", "Step", "step"):
        if pref in raw.columns:
            raw = raw.drop([c for c in ("_step",) if c in raw.columns and c != pref])
            break
    return raw, unit


def read_jsonl(path: Path, notes: list[str]) -> tuple[pl.DataFrame, str]:
    """One JSON object per line (`{"step": 1, "loss": 2.3, ...}`); nested objects are flattened."""
    rows = jsonl_rows(enumerate(_read_text(path), start=1), path, notes)
    if not rows:
        raise ForensicsError(f"{path}: no JSON objects found")
    return rows_to_frame(rows), "line"


def jsonl_rows(
    numbered: Iterable[tuple[int, str]], path: Path, notes: list[str]
) -> list[dict[str, object]]:
    """(line number, line) pairs -> flattened JSON objects; unreadable lines are counted in one
    note that names the first few by number (a log with thousands of torn lines stays readable)."""
    rows: list[dict[str, object]] = []
    bad: list[str] = []
    n_bad = 0
    for i, ln in numbered:
        if not ln.strip():
            continue
        try:
            obj = json.loads(ln)
        except json.JSONDecodeError as err:
            n_bad += 1
            if len(bad) < MAX_WARNINGS_SHOWN:
                bad.append(f"line {i}: not valid JSON ({err.msg})")
            continue
        if not isinstance(obj, dict):
            n_bad += 1
            if len(bad) < MAX_WARNINGS_SHOWN:
                bad.append(f"line {i}: not a JSON object")
            continue
        flat = _flatten(obj)
        flat["__line"] = i
        rows.append(flat)
    if n_bad:
        more = f" (and {n_bad - len(bad)} more)" if n_bad > len(bad) else ""
        notes.append(f"{path}: {n_bad} unreadable lines skipped: {'; '.join(bad)}{more}")
    return rows


def read_hf_trainer_state(path: Path, notes: list[str]) -> tuple[pl.DataFrame, str]:
    """Hugging Face `trainer_state.json`: training rows of `log_history` (`eval_loss` joined)."""
    try:
        state = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except json.JSONDecodeError as err:
        raise ForensicsError(f"{path}: not valid JSON (line {err.lineno}: {err.msg})") from None
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise ForensicsError(f"{path}: no 'log_history' list (not a trainer_state.json?)")
    train, evals = [], {}
    for i, entry in enumerate(history):
        if not isinstance(entry, dict) or "step" not in entry:
            continue
        if "loss" in entry:
            row = {k: v for k, v in _flatten(entry).items() if k != "eval_loss"}
            row["__line"] = i
            train.append(row)
        elif "eval_loss" in entry and isinstance(entry["step"], int | float | str):
            evals[entry["step"]] = entry["eval_loss"]
    if not train:
        raise ForensicsError(f"{path}: log_history has no training rows with a 'loss' field")
    for row in train:
        step = row.get("step")  # absent when the entry's step was a list or an object
        if isinstance(step, int | float | str) and step in evals:
            row["eval_loss"] = evals[step]
    return rows_to_frame(train), "log_history entry"


def read_tensorboard(path: Path, notes: list[str]) -> tuple[pl.DataFrame, str]:
    """TensorBoard event files (a file or a run directory), every record's CRCs checked
    (`tfrecord.iter_records`; tensorboard's own loader stops at the first bad one).

    Megatron's `... vs samples` / `vs tokens` tags are skipped (their step is not the iteration).
    A truncated last record (a run killed mid-write) is reported and the records before it kept.
    """
    from forensics.triage.tfrecord import RecordScan, iter_records

    files = _event_files(path) if path.is_dir() else [path]
    points: list[tuple[int, str, float]] = []
    for f in files:
        scan = RecordScan()
        points += event_scalars(iter_records(f, scan), scan)
        notes.extend(scan_notes(f, scan))
    if not points:
        raise ForensicsError(f"{path}: no scalar summaries found in the TensorBoard event file(s)")
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


_READERS: dict[str, Reader] = {
    "megatron": read_megatron,
    "olmo-core": read_olmo_core,
    "csv": read_csv,
    "wandb-csv": read_wandb_csv,
    "jsonl": read_jsonl,
    "hf-trainer-state": read_hf_trainer_state,
    "tensorboard": read_tensorboard,
}


# --------------------------------------------------------------------------- helpers


def _event_files(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*tfevents*") if p.is_file())


def _flatten(obj: dict[str, object], prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in obj.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, f"{key}/"))
        elif isinstance(v, list | tuple):
            continue
        else:
            out[key] = v
    return out


def _first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
