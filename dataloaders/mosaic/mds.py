"""MDS shards (MosaicML streaming's format), read with numpy: the sample counts the order needs,
and the text and provenance columns of given samples.

index.json (format/index.py, format/mds/writer.py of mosaicml-streaming 0.13.0):
    {"version": 2, "shards": [{"format": "mds", "samples": N, "column_names": [...],
     "column_encodings": [...], "column_sizes": [size or null, ...],
     "raw_data": {"basename": "shard.00000.mds", "bytes": B, ...}, "zip_data": ..., ...}]}
A shard file (format/mds/writer.py:get_header_data, reader.py:get_sample_data):
    uint32 num_samples, uint32 offsets[num_samples + 1] (byte offsets of every sample in the
    file), then the samples. A sample: uint32 sizes of its variable-size columns (null
    column_sizes), in column order, then every column's bytes in column order
    (reader.py:decode_sample).
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dataloaders.errors import ForensicsError
from dataloaders.mapped_pages import tracked
from dataloaders.mosaic.compression import decompress, require_codec
from dataloaders.mosaic.remote import fetch

INDEX = "index.json"

# Encodings rendered as text for the text and provenance columns (format/mds/encodings.py).
_NUMERIC = {
    "int": "<i8",
    "int8": "<i1",
    "int16": "<i2",
    "int32": "<i4",
    "int64": "<i8",
    "uint8": "<u1",
    "uint16": "<u2",
    "uint32": "<u4",
    "uint64": "<u8",
    "float16": "<f2",
    "float32": "<f4",
    "float64": "<f8",
}
_TEXT = {"str", "str_int", "str_float", "str_decimal", "json"}


@dataclass(frozen=True)
class Shard:
    """One MDS shard as index.json describes it."""

    path: Path
    samples: int
    size: int  # raw_data.bytes
    column_names: list[str]
    column_encodings: list[str]
    column_sizes: list[int | None]
    zip_path: Path | None = None  # read decompressed when only the compressed file is there
    compression: str | None = None  # index.json's "compression", e.g. "zstd" or "zstd:7"
    remote: str | None = None  # the stream's remote, when the shard is not in `local` yet
    zip_size: int | None = None  # zip_data.bytes: the compressed file a download brings


@dataclass(frozen=True)
class MDSStream:
    """A stream's directory: its shards in index.json order and the hash of index.json."""

    local: Path
    shards: list[Shard]
    index_sha256: str

    @property
    def samples_per_shard(self) -> np.ndarray:
        return np.array([s.samples for s in self.shards], dtype=np.int64)


def open_stream(local: Path, remote: str | None = None) -> MDSStream:
    """Read and check a stream's index.json; every shard must be on disk with the byte size the
    index gives (a missing or rewritten shard would silently move every later sample), or, with
    `remote`, is downloaded into `local` when a sample of it is first read (remote.py)."""
    index = local / INDEX
    if remote is not None and not index.is_file():
        fetch(remote, INDEX, index)
    if not index.is_file():
        raise ForensicsError(f"{index}: not found (a MosaicML streaming directory has index.json)")
    raw = index.read_bytes()
    try:
        obj = json.loads(raw)
        infos = obj["shards"]
        if obj.get("version") != 2:
            raise ValueError(f"version {obj.get('version')!r}, expected 2")
    except (ValueError, KeyError, TypeError) as err:
        raise ForensicsError(f"{index}: not a streaming index ({err})") from None
    shards = []
    for k, info in enumerate(infos):
        if info.get("format") != "mds":
            raise ForensicsError(
                f"{index}: shard {k} has format {info.get('format')!r}; only MDS is supported"
            )
        basename, size, samples = _shard_fields(info, k, index)
        path = local / basename
        zip_path, compression, later = None, None, None
        if path.is_file():
            _check_size(path, size, index)
        else:
            zip_path, compression = _compressed(info, local, index)
            if zip_path is None and remote is None:
                raise ForensicsError(f"{path}: shard missing, listed in {index}")
            if zip_path is None:  # fetched from remote on first read, zip first (stream.py:376)
                later = remote
                zipped = info.get("zip_data") or {}
                if zipped:
                    zip_path, compression = local / zipped["basename"], info.get("compression")
        shards.append(
            Shard(
                path=path,
                samples=samples,
                size=size,
                column_names=list(info["column_names"]),
                column_encodings=list(info["column_encodings"]),
                column_sizes=list(info["column_sizes"]),
                zip_path=zip_path,
                compression=compression,
                remote=later,
                zip_size=int(info["zip_data"]["bytes"]) if info.get("zip_data") else None,
            )
        )
    if not shards:
        raise ForensicsError(f"{index}: no shards")
    return MDSStream(local=local, shards=shards, index_sha256=hashlib.sha256(raw).hexdigest())


def _shard_fields(info: Any, k: int, index: Path) -> tuple[str, int, int]:
    """A shard entry's file name, byte size and sample count, each of the type streaming's
    MDSWriter writes (format/base/writer.py `get_config`): anything else is refused naming the
    shard and the field, before a count reaches the partition arithmetic."""
    where = f"{index}: shard {k}"
    if not isinstance(info, dict) or not isinstance(info.get("raw_data"), dict):
        raise ForensicsError(f"{where} has no raw_data entry")
    basename = info["raw_data"].get("basename")
    if not isinstance(basename, str) or not basename or "/" in basename or basename in ("..", "."):
        raise ForensicsError(f"{where}: raw_data.basename {basename!r} is not a file name")
    values = {"raw_data.bytes": info["raw_data"].get("bytes"), "samples": info.get("samples")}
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ForensicsError(f"{where}: {name} is {value!r}, not a count")
    for key in ("column_names", "column_encodings", "column_sizes"):
        if not isinstance(info.get(key), list):
            raise ForensicsError(f"{where}: {key} is {info.get(key)!r}, not a list")
    return basename, values["raw_data.bytes"], values["samples"]


def _check_size(path: Path, size: int, index: Path) -> None:
    actual = path.stat().st_size
    if actual != size:
        raise ForensicsError(
            f"{path}: {actual} bytes, but {index} says {size}: the shard changed since the "
            "run, so its samples no longer sit where the run read them"
        )


def _compressed(info: dict[str, Any], local: Path, index: Path) -> tuple[Path | None, str | None]:
    """(zip path, compression) of a shard present only compressed, as Stream does it: a missing
    raw file with a zip_data entry is decompressed (stream.py:_prepare_shard_part); (None, None)
    when there is no compressed file either."""
    zipped = info.get("zip_data") or {}
    if not zipped or not (local / zipped["basename"]).is_file():
        return None, None
    zip_path = local / zipped["basename"]
    compression = info.get("compression")
    try:
        require_codec(compression)
    except ValueError as err:
        raise ForensicsError(f"{zip_path}: {err}") from None
    _check_size(zip_path, int(zipped["bytes"]), index)
    return zip_path, compression


def shard_buffer(shard: Shard) -> Any:
    """The shard's bytes: the raw file mapped, or the compressed file decompressed in memory
    (checked against index.json's raw size, as the decompressed file would be)."""
    import mmap

    if shard.remote is not None:
        _download(shard)
    if shard.zip_path is None:
        with open(shard.path, "rb") as fh:
            return tracked(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ))
    return _decompressed(shard.zip_path, shard.compression, shard.size)


def _download(shard: Shard) -> None:
    """Bring a shard from its stream's remote into `local` (the compressed file when the index
    lists one, else the raw file; stream.py:376-399), checked against the index's size."""
    target = shard.zip_path if shard.zip_path is not None else shard.path
    if shard.path.is_file() or target.is_file():
        return
    assert shard.remote is not None
    fetch(shard.remote, target.name, target)
    want = shard.zip_size if shard.zip_path is not None else shard.size
    _check_size(target, int(want or 0), shard.path.parent / INDEX)
    if shard.zip_path is not None:
        require_codec(shard.compression)


@functools.lru_cache(maxsize=2)
def _decompressed(zip_path: Path, compression: str | None, size: int) -> bytes:
    """A compressed shard's raw bytes; the last two are kept, since a replay reads the same
    shard once per window and column set (a shard is at most size_limit, 64 MiB by default)."""
    data = decompress(compression, zip_path.read_bytes())
    if len(data) != size:
        raise ForensicsError(
            f"{zip_path}: decompresses to {len(data)} bytes, but index.json says "
            f"{size}: the shard changed since the run"
        )
    return data


def check_columns(stream: MDSStream, columns: list[str], *, where: str) -> None:
    """Every requested column exists in every shard with an encoding we can render as text."""
    for shard in stream.shards:
        for column in columns:
            if column not in shard.column_names:
                raise ForensicsError(
                    f"{where}{shard.path}: no column {column!r} (it has {shard.column_names})"
                )
            enc = shard.column_encodings[shard.column_names.index(column)]
            if enc not in _TEXT and enc not in _NUMERIC:
                raise ForensicsError(
                    f"{where}{shard.path}: column {column!r} is {enc!r}; text and provenance "
                    f"columns must be str, str_int/float/decimal, json or a number"
                )


def _checked_offsets(shard: Shard, header: np.ndarray, size: int) -> np.ndarray:
    """int64[samples + 1]: the shard's offsets table (header[1:]), which MDSWriter writes as
    the first sample's start (after the header and the writer's config JSON), then each
    sample's end in order, the last the file's size (mosaicml-streaming 0.13
    streaming/base/format/mds/writer.py:139-144 `encode_joint_shard`); a table that is not is
    refused, since a random one reads other samples' bytes as text."""
    offsets = header[1:].astype(np.int64)
    n = shard.samples
    if (
        len(offsets) != n + 1
        or offsets[0] < 4 * (n + 2)
        or offsets[-1] != size
        or np.any(np.diff(offsets) < 0)
    ):
        raise ForensicsError(
            f"{shard.path}: its offsets table is not MDS's (each sample's start, ascending, from "
            f"past the header to the file's {size} bytes); the shard is damaged"
        )
    return offsets


def _gather(buf: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """uint8[len(starts), width]: `width` bytes at every start (vectorised fancy index)."""
    return buf[starts[:, None] + np.arange(width, dtype=np.int64)[None, :]]


def read_columns(shard: Shard, rows: np.ndarray, columns: list[str]) -> dict[str, list[str]]:
    """The given columns (as text) of the given rows of one shard, in `rows` order. Offsets and
    sizes are gathered with numpy for all rows at once; only the final decode is per value."""
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) and (rows.min() < 0 or rows.max() >= shard.samples):
        raise ForensicsError(f"{shard.path}: no sample {rows.max()} (it has {shard.samples})")
    mm = shard_buffer(shard)
    buf = np.frombuffer(mm, dtype=np.uint8)
    header = buf[: 4 * (shard.samples + 2)].view("<u4")
    if int(header[0]) != shard.samples:
        raise ForensicsError(
            f"{shard.path}: holds {int(header[0])} samples, index.json says {shard.samples}"
        )
    offsets = _checked_offsets(shard, header, len(buf))
    begin = offsets[rows]  # byte offset of every wanted sample
    var_cols = [k for k, size in enumerate(shard.column_sizes) if size is None]
    n_var = len(var_cols)
    # lengths[:, c]: byte length of column c in every wanted sample (fixed, or the sample's
    # uint32 size prefix for a variable-size column, in column order).
    lengths = np.zeros((len(rows), len(shard.column_sizes)), dtype=np.int64)
    if n_var:
        prefix = _gather(buf, begin, 4 * n_var).view("<u4").reshape(len(rows), n_var)
        lengths[:, var_cols] = prefix
    for k, size in enumerate(shard.column_sizes):
        if size is not None:
            lengths[:, k] = size
    starts = begin[:, None] + 4 * n_var + np.cumsum(lengths, axis=1) - lengths
    if len(rows) and np.any(begin + 4 * n_var + lengths.sum(axis=1) > offsets[rows + 1]):
        bad = int(rows[np.argmax(begin + 4 * n_var + lengths.sum(axis=1) > offsets[rows + 1])])
        raise ForensicsError(
            f"{shard.path}: sample {bad}'s column sizes run past its end in the offsets table; "
            "the shard is damaged"
        )
    out: dict[str, list[str]] = {}
    for column in columns:
        col = shard.column_names.index(column)
        enc = shard.column_encodings[col]
        if enc in _TEXT:
            st, ln = starts[:, col].tolist(), lengths[:, col].tolist()
            out[column] = [
                mm[a : a + n].decode("utf-8", errors="replace") for a, n in zip(st, ln, strict=True)
            ]
        else:
            dtype = np.dtype(_NUMERIC[enc])
            values = _gather(buf, starts[:, col], dtype.itemsize).view(dtype).reshape(-1)
            out[column] = [str(v) for v in values.tolist()]
    del buf, header
    if hasattr(mm, "close"):
        mm.close()
    return out


def describe(stream: MDSStream) -> dict[str, Any]:
    """The stream as a skip list's fingerprint records it."""
    return {
        "local": str(stream.local),
        "index_sha256": stream.index_sha256,
        "shards": [
            {"file": s.path.name, "size": s.size, "samples": s.samples} for s in stream.shards
        ],
    }
