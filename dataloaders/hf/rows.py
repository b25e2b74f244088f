"""Reading documents back from the shards, row-numbered exactly as `datasets` numbers them.

Rows are read with the same packaged builder the run used (`load_dataset(fmt, streaming=True)` on
the one file), so row r of a shard here is row r of the id tables in `order.py`, whatever the file
reader does with blank lines or batch boundaries.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from dataloaders.errors import ForensicsError
from dataloaders.hf.order import _datasets, without_torch
from dataloaders.hf.shards import Shard


def _tables(shard: Shard, builder: str) -> Any:
    """The (key, Arrow table) stream the run's reader yields for one file."""
    datasets = _datasets()
    if shard.path.is_file() and shard.path.stat().st_size == 0:
        raise ForensicsError(f"{shard.path}: empty file (0 bytes); the run read rows from it")
    try:
        with without_torch():
            files = [str(shard.path)]
            ds = datasets.load_dataset(builder, data_files=files, split="train", streaming=True)
    except Exception as err:  # unreadable file: any of datasets' many error types
        raise ForensicsError(f"{shard.path}: cannot read it as {builder}: {_first(err)}") from None
    return _named_errors(shard, builder, ds._ex_iterable.iter_arrow())


def _named_errors(shard: Shard, builder: str, tables: Any) -> Any:
    """`tables`, with a read error (a truncated file, a cast to another schema: any of pyarrow's
    and datasets' many error types) turned into one line naming the file."""
    try:
        yield from tables
    except ForensicsError:
        raise
    except Exception as err:
        raise ForensicsError(f"{shard.path}: cannot read it as {builder}: {_first(err)}") from None


def _first(err: Exception) -> str:
    """The first line of an error, or its type when it says nothing (an empty file)."""
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def check_parquet_shards(shards: list[Shard]) -> None:
    """Every Parquet shard has a readable footer and the first shard's columns: a truncated or
    empty file, a JSONL named .parquet, or a file of another dataset is refused naming it
    before the order is built (from the footers alone: cheap)."""
    import pyarrow.parquet as pq

    first: list[str] | None = None
    for shard in shards:
        try:
            names = list(pq.ParquetFile(shard.path).schema_arrow.names)
        except Exception as err:  # pyarrow raises ArrowInvalid / OSError
            raise ForensicsError(f"{shard.path}: not a readable Parquet file ({err})") from None
        if first is None:
            first = names
        elif sorted(names) != sorted(first):
            raise ForensicsError(
                f"{shard.path}: has columns {names}, but {shards[0].path} has {first}: the run's "
                "files share one schema (datasets refuses to mix them)"
            )


def first_unreadable(shards: list[Shard], builder: str) -> ForensicsError | None:
    """The error of the first shard the run's reader cannot read to the end, or of one whose
    columns are not the first shard's, or None: used when building the order failed, to name
    the file (datasets' error does not)."""
    first: list[str] | None = None
    for shard in shards:
        try:
            for _, table in _tables(shard, builder):
                names = list(table.column_names)
                if first is None:
                    first = names
                elif sorted(names) != sorted(first):
                    return ForensicsError(
                        f"{shard.path}: has columns {names}, but {shards[0].path} has {first}: "
                        "the run's files share one schema (datasets refuses to mix them)"
                    )
                break
        except ForensicsError as err:
            return err
    for shard in shards:
        try:
            for _ in _tables(shard, builder):
                pass
        except ForensicsError as err:
            return err
    return None


def count_rows(shard: Shard, builder: str) -> int:
    """Rows in a shard (Parquet: from the footer; others: by reading it)."""
    if builder == "parquet":
        import pyarrow.parquet as pq

        try:
            return pq.ParquetFile(shard.path).metadata.num_rows
        except Exception as err:  # pyarrow raises ArrowInvalid / OSError
            raise ForensicsError(f"{shard.path}: not a readable Parquet file ({err})") from None
    return sum(len(table) for _, table in _tables(shard, builder))


def read_rows(shard: Shard, builder: str, rows: np.ndarray, columns: list[str]) -> pl.DataFrame:
    """Columns `columns` of the given rows of one shard -> DataFrame with `row` plus the columns
    (as strings), in the order of `rows`. A missing column is a ForensicsError naming the file."""
    import pyarrow as pa

    wanted = np.unique(rows)
    pieces = []
    start = 0
    for _, table in _tables(shard, builder):
        end = start + len(table)
        lo, hi = np.searchsorted(wanted, [start, end])
        if hi > lo:
            missing = [c for c in columns if c not in table.column_names]
            if missing:
                raise ForensicsError(
                    f"{shard.path}: no column {missing[0]!r} (columns: {table.column_names})"
                )
            take = pa.array(wanted[lo:hi] - start, type=pa.int64())
            part = table.select(columns).take(take)
            frame = pl.from_arrow(part)
            assert isinstance(frame, pl.DataFrame)
            pieces.append(frame.with_columns(pl.Series("row", wanted[lo:hi], dtype=pl.Int64)))
        start = end
        if hi == len(wanted) and hi > 0 and wanted[-1] < end:
            break
    if not pieces or sum(len(p) for p in pieces) != len(wanted):
        raise ForensicsError(f"{shard.path}: has {start} rows, asked for row {int(wanted[-1])}")
    frame = pl.concat(pieces, how="vertical_relaxed")
    frame = frame.with_columns(
        [pl.col(c).cast(pl.Utf8, strict=False) for c in columns if c in frame.columns]
    )
    order = pl.DataFrame({"row": rows.astype(np.int64)})
    return order.join(frame, on="row", how="left", maintain_order="left")


def iter_texts(shard: Shard, builder: str, text_field: str) -> Any:
    """Every document text of a shard in row order, table by table (for token counting)."""
    for _, table in _tables(shard, builder):
        if text_field not in table.column_names:
            raise ForensicsError(
                f"{shard.path}: no column {text_field!r} (columns: {table.column_names})"
            )
        yield table.column(text_field).to_pylist()
