"""Token files of an OLMo-core run: sizes, instance offsets, document boundaries, fingerprint.

OLMo-core's NumpyFSLDataset (olmo_core/data/numpy_dataset.py, `NumpyFSLDataset`) concatenates the
instances of its token files in path order: file k holds `tokens // sequence_length` instances
(with `max_target_sequence_length` M: `(tokens // M) * (M // sequence_length)`), instance l of a
file is its tokens [l * S, (l + 1) * S), and a file's tail shorter than an instance is never read.
The files are raw arrays (Dolma's `.npy` naming, no NPY header) of `dtype` tokens.

Documents are not part of the order, only of provenance: they are the spans of the Dolma metadata
file beside a token file (`x.npy` -> `x.csv.gz`, rows `start,end,id,src,loc` as Dolma's
tokenizer writes them, allenai/dolma 2cebbe26 python/dolma/tokenizer/data_types.py
`MemmapMetadata`; authoritative, as OLMo-core's `iter_document_indices` says) or, without one,
EOS-terminated spans of the array (with a BOS id: an EOS followed by a BOS ends a document).
Tokens after the last boundary form one more, unterminated document.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dataloaders.errors import ForensicsError
from dataloaders.mapped_pages import memmap
from dataloaders.olmo_core import cache
from dataloaders.olmo_core.remote import metadata_copy
from dataloaders.storage import head
from dataloaders.storage.arrays import RemoteArray
from dataloaders.storage.urls import is_remote

# OLMo-core's dataset fingerprint format (NumpyDatasetBase.fingerprint_version).
FINGERPRINT_VERSION = "v2.0"


@dataclass
class TokenFile:
    """One token array of the dataset, with where its instances and documents start."""

    source: str
    path: Path | str  # a str: the file's URL, in object storage (dataloaders/olmo_core/remote.py)
    size: int  # bytes
    tokens: int
    instances: int
    metadata: Path | None = None  # the Dolma .csv.gz beside it (a local copy), when present
    _doc_ends: np.ndarray | None = field(default=None, repr=False)
    remote: Any = field(default=None, repr=False)  # the object's ObjectInfo (size, ETag)
    _array: Any = field(default=None, repr=False)


def token_array(f: TokenFile, dtype: Any) -> Any:
    """The file's tokens: a memory map, or for a file in object storage an array read by byte
    ranges (dataloaders/storage/arrays.py), made once per file."""
    if f._array is None:
        if f.remote is not None:
            f._array = RemoteArray(f.remote, dtype, f.tokens, rules="scheme-profiles")
        else:
            f._array = memmap(f.path, dtype, (f.tokens,))
    return f._array


def dtype_of(name: str) -> type[np.unsignedinteger[Any]]:
    """numpy dtype class from the config's spelling (uint8 .. uint64)."""
    return {"uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64}[name]


def metadata_path(path: Path) -> Path:
    """Dolma's metadata file for a token file (OLMo-core replaces '.npy' with '.csv.gz')."""
    return path.with_name(path.name.replace(".npy", ".csv.gz"))


def open_token_files(
    pairs: list[tuple[str, Path]], data: Any, where: str, known: dict[Path, TokenFile] | None = None
) -> list[TokenFile]:
    """The token files of (source name, path) pairs in dataset order (objects shared through
    `known`, so a file used by two data stages is scanned once); a missing or empty file is a
    one-line error."""
    dtype = dtype_of(data.dtype)
    item = np.dtype(dtype).itemsize
    seq = data.sequence_length
    known = {} if known is None else known
    out: list[TokenFile] = []
    for name, given in pairs:
        if is_remote(given):
            if given not in known:
                known[given] = open_remote_file(name, str(given), data, item)
            out.append(known[given])
            continue
        path = Path(given)
        if path in known:
            out.append(known[path])
            continue
        if not path.is_file():
            raise ForensicsError(f"{path}: token file not found (data.sources.{name})")
        size = path.stat().st_size
        tokens = size // item
        if size % item:
            raise ForensicsError(
                f"{path}: {size} bytes is not a whole number of {data.dtype} tokens "
                "(wrong data.dtype, or a truncated file)"
            )
        instances = instance_count(tokens, data)
        meta = metadata_path(path)
        known[path] = TokenFile(
            source=name,
            path=path,
            size=size,
            tokens=tokens,
            instances=instances,
            metadata=meta if meta.is_file() and meta != path else None,
        )
        out.append(known[path])
    if sum(f.instances for f in out) == 0:
        raise ForensicsError(
            f"{where}the token files hold no instance of {seq} tokens (too short, or wrong dtype)"
        )
    return out


def instance_count(tokens: int, data: Any) -> int:
    """Instances of a file of `tokens` tokens (NumpyFSLDataset: whole sequences, or whole
    max_target_sequence_length chunks of them)."""
    seq, target = data.sequence_length, data.max_target_sequence_length
    if target is None or target == seq:
        return tokens // seq
    return (tokens // target) * (target // seq)


def olmo_fingerprint(files: list[TokenFile], data: Any) -> str:
    """NumpyFSLDataset.fingerprint, as OLMo-core computes it (numpy_dataset.py: the class name,
    the fingerprint fields, then every file's base name and byte size)."""
    sha = hashlib.sha256()
    sha.update(b"class=NumpyFSLDataset")
    fields = {
        "vocab_size": data.vocab_size,
        "pad_token_id": data.pad_token_id,
        "eos_token_id": data.eos_token_id,
        "dtype": dtype_of(data.dtype),  # formatted as the class, e.g. <class 'numpy.uint16'>
        "max_target_sequence_length": data.max_target_sequence_length,
        "bos_token_id": data.bos_token_id,
    }
    for name, value in fields.items():
        sha.update(f"{name}={value},".encode())
    for f in files:
        sha.update(f"path={os.path.basename(f.path)},size={f.size},".encode())
    return sha.hexdigest()


def _ends_from_array(f: TokenFile, dtype: Any, eos: int, bos: int | None) -> np.ndarray:
    tokens = np.asarray(token_array(f, dtype))  # without metadata, every EOS must be seen
    if bos is None:
        ends = np.flatnonzero(tokens == eos) + 1
    else:
        ends = np.flatnonzero((tokens[:-1] == eos) & (tokens[1:] == bos)) + 1
        if f.tokens and tokens[-1] == eos:
            ends = np.append(ends, f.tokens)
    return ends.astype(np.int64)


def _read_metadata_rows(path: Path) -> list[list[str]]:
    try:
        with gzip.open(path, "rt", encoding="utf-8", newline="") as handle:
            return list(csv.reader(io.StringIO(handle.read())))
    except (OSError, EOFError, UnicodeDecodeError, csv.Error) as err:
        raise ForensicsError(f"{path}: unreadable metadata file ({err})") from None


def _ends_from_metadata(f: TokenFile) -> np.ndarray:
    assert f.metadata is not None
    rows = _read_metadata_rows(f.metadata)
    try:
        spans = np.asarray([(int(r[0]), int(r[1])) for r in rows if r], dtype=np.int64)
    except (ValueError, IndexError):
        raise ForensicsError(
            f"{f.metadata}: rows must start with start,end token offsets"
        ) from None
    spans = spans.reshape(-1, 2)
    if len(spans):
        starts, ends = spans[:, 0], spans[:, 1]
        if starts[0] != 0 or np.any(starts[1:] != ends[:-1]) or np.any(ends <= starts):
            raise ForensicsError(
                f"{f.metadata}: document spans are not contiguous from token 0 "
                "(cannot tell which document a token belongs to)"
            )
        if ends[-1] > f.tokens:
            raise ForensicsError(
                f"{f.metadata}: a document ends at token {ends[-1]}, the file has {f.tokens}"
            )
        return ends
    return np.zeros(0, dtype=np.int64)


def document_ends(f: TokenFile, data: Any) -> np.ndarray:
    """Exclusive end token of every document of the file (file coordinates), the last = tokens."""
    if f._doc_ends is None:
        key = {"eos": data.eos_token_id, "bos": data.bos_token_id, "dtype": data.dtype}
        if f.remote is not None:  # keyed by the objects' identity
            if f.metadata is not None:
                stat = f.metadata.stat()
                key["metadata"] = [str(f.metadata), stat.st_size, stat.st_mtime_ns]
            name = cache.doc_ends_name_remote(f.remote.url, f.remote.etag, f.remote.size, **key)
        else:
            source = f.metadata if f.metadata is not None else Path(f.path)
            name = cache.doc_ends_name(Path(f.path), source, **key)
        ends = cache.load_doc_ends(name)
        if ends is None or not len(ends) or ends[-1] != f.tokens or np.any(np.diff(ends) <= 0):
            if f.metadata is not None:
                ends = _ends_from_metadata(f)
            else:
                dtype = dtype_of(data.dtype)
                ends = _ends_from_array(f, dtype, data.eos_token_id, data.bos_token_id)
            if not len(ends) or ends[-1] < f.tokens:
                ends = np.append(ends, f.tokens)  # the unterminated tail is a document too
            cache.save_doc_ends(name, ends)
        f._doc_ends = ends.astype(np.int64)
    return f._doc_ends


def metadata_fields(
    f: TokenFile, rows: np.ndarray, names: list[str]
) -> dict[str, list[str | None]]:
    """The metadata columns after start,end for the given document rows of a file (None when the
    file has no metadata or the row has fewer columns)."""
    out: dict[str, list[str | None]] = {n: [None] * len(rows) for n in names}
    if f.metadata is None or not names:
        return out
    table = _read_metadata_rows(f.metadata)
    for i, r in enumerate(rows.tolist()):
        row = table[r] if r < len(table) else []
        for k, name in enumerate(names):
            out[name][i] = row[2 + k] if len(row) > 2 + k else None
    return out


def read_tokens(f: TokenFile, start: int, end: int, data: Any) -> np.ndarray:
    """Tokens [start, end) of a file."""
    return np.asarray(token_array(f, dtype_of(data.dtype))[start:end])


def open_remote_file(name: str, url: str, data: Any, item: int) -> TokenFile:
    """A token file in object storage, read as OLMo-core's io.py reads it (its size by HEAD,
    `get_file_size`; its tokens by byte ranges, `get_bytes_range`), with the Dolma metadata
    beside it (`x.csv.gz`) copied into the cache when it exists."""
    info = head(url, "scheme-profiles")
    if info.size % item:
        raise ForensicsError(
            f"{info}: {info.size} bytes is not a whole number of {data.dtype} tokens "
            "(wrong data.dtype, or a truncated file)"
        )
    tokens = info.size // item
    return TokenFile(
        source=name,
        path=url,
        size=info.size,
        tokens=tokens,
        instances=instance_count(tokens, data),
        metadata=metadata_copy(url),
        remote=info,
    )
