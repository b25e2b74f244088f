"""Atomic output files: a reader never sees a half-written report, table or skip list.

Every output is written to a temporary file in the destination directory and renamed into place
(`os.replace` is atomic on POSIX within one filesystem). If the writer raises, the temporary file
is removed and the destination is untouched.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dataloaders.errors import ForensicsError


@contextmanager
def atomic_path(path: str | os.PathLike[str], *, overwrite: bool = True) -> Iterator[Path]:
    """Yield a temporary path next to `path`; move it onto `path` when the block succeeds.

    `overwrite=False` refuses to replace an existing file (skip lists are never clobbered
    without --force).
    """
    final = Path(path)
    if not overwrite and final.exists():
        raise ForensicsError(f"{final}: already exists; pass --force to overwrite it")
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text_atomic(path: str | os.PathLike[str], text: str, *, overwrite: bool = True) -> Path:
    with atomic_path(path, overwrite=overwrite) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_bytes_atomic(
    path: str | os.PathLike[str], data: bytes, *, overwrite: bool = True
) -> Path:
    with atomic_path(path, overwrite=overwrite) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_json_atomic(path: str | os.PathLike[str], obj: Any, *, overwrite: bool = True) -> Path:
    return write_text_atomic(
        path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n", overwrite=overwrite
    )


def write_parquet_atomic(
    table: Any, path: str | os.PathLike[str], *, overwrite: bool = True
) -> Path:
    """Write a polars DataFrame or a pyarrow Table to Parquet atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with atomic_path(path, overwrite=overwrite) as tmp:
        try:
            if isinstance(table, pa.Table):
                pq.write_table(table, tmp)
            else:
                table.write_parquet(tmp)
        except OSError:
            raise
        except Exception as err:
            raise _write_failure(err, Path(tmp)) from err
    return Path(path)


def write_parquet_parts(frames: Iterable[Any], path: str | os.PathLike[str]) -> Path:
    """Polars frames, in order, as one Parquet file at `path` (one row group each, zstd,
    written atomically): one frame in memory at a time. Each frame is cast to the first one's
    Arrow schema (a column all null in one part keeps the file's type)."""
    import pyarrow.parquet as pq

    with atomic_path(path) as tmp:
        writer = None
        try:
            for frame in frames:
                table = frame.to_arrow()
                if writer is None:
                    writer = pq.ParquetWriter(tmp, table.schema, compression="zstd")
                writer.write_table(table.cast(writer.schema))
        finally:
            if writer is not None:
                writer.close()
    return Path(path)


def _write_failure(err: Exception, tmp: Path) -> Exception:
    """polars reports a full disk as "File out of specification: Invalid thrift: transport
    error", without the errno; put it back (ENOSPC when the file system has no room left,
    EFBIG when the file stopped at this process's file size limit), so that the user gets the
    one-line disk message instead of an internal error. Anything else is returned as it was."""
    import errno
    import resource

    try:
        stat = os.statvfs(tmp.parent)
        if stat.f_bavail * stat.f_frsize < 1 << 20:
            return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp.parent))
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        size = tmp.stat().st_size if tmp.exists() else 0
        if limit != resource.RLIM_INFINITY and size >= limit - (1 << 16):
            return OSError(errno.EFBIG, os.strerror(errno.EFBIG), str(tmp.parent))
    except OSError:
        pass
    return err
