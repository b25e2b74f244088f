"""Megatron's `.bin/.idx` token files (MMIDIDX version 1), read and written with numpy alone.

Megatron-core's `IndexedDataset` needs torch; replay must not. The format (little-endian), as
megatron-core 0.16 `indexed_dataset.py` writes it:

    .idx  header (34 bytes)
            magic            9 bytes   b"MMIDIDX\\x00\\x00"
            version          <Q        1
            dtype code       <B        1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 6 f64, 7 f32, 8 u16
            sequence_count   <Q        number of sequences S
            document_count   <Q        number of document boundaries D (= documents + 1)
          sequence_lengths   int32[S]  tokens in each sequence
          sequence_pointers  int64[S]  byte offset of each sequence in .bin
          document_indices   int64[D]  sequence index where each document starts; [0] = 0,
                                       [-1] = S (a document is one sequence unless the data was
                                       preprocessed with --split-sentences)
          sequence_modes     int8[S]   optional, multimodal datasets only
    .bin  the token stream, sequences back to back in the dtype above

Every problem with a file (missing, truncated, foreign, unsupported) is a `DataError` (a
`ForensicsError`) naming the file and what is wrong, never a numpy exception from deep inside a
memory map.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from dataloaders.errors import DataError
from dataloaders.mapped_pages import memmap
from dataloaders.megatron.checked import checked_once
from dataloaders.megatron.remote import open_remote
from dataloaders.storage.arrays import RemoteArray
from dataloaders.storage.urls import shown

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER_SIZE = 34  # 9 magic + 8 version + 1 dtype code + 8 sequence count + 8 document count

# Megatron's DType enum: code -> numpy dtype (little-endian on disk).
DTYPE_BY_CODE: dict[int, np.dtype[Any]] = {
    1: np.dtype("<u1"),
    2: np.dtype("<i1"),
    3: np.dtype("<i2"),
    4: np.dtype("<i4"),
    5: np.dtype("<i8"),
    6: np.dtype("<f8"),
    7: np.dtype("<f4"),
    8: np.dtype("<u2"),
}
CODE_BY_DTYPE: dict[np.dtype[Any], int] = {v: k for k, v in DTYPE_BY_CODE.items()}


def idx_path(prefix: str | os.PathLike[str]) -> Path:
    """The index file of a dataset prefix (Megatron's `get_idx_path`)."""
    return Path(f"{os.fspath(prefix)}.idx")


def bin_path(prefix: str | os.PathLike[str]) -> Path:
    """The token file of a dataset prefix (Megatron's `get_bin_path`)."""
    return Path(f"{os.fspath(prefix)}.bin")


def optimal_dtype(vocab_size: int | None) -> np.dtype[Any]:
    """uint16 when the vocabulary fits (< 65500, Megatron's threshold), else int32."""
    if vocab_size is not None and vocab_size < 65500:
        return np.dtype("<u2")
    return np.dtype("<i4")


def dtype_code(dtype: Any) -> int:
    """Megatron's dtype code for a numpy dtype; a ForensicsError for types it cannot store."""
    dt = np.dtype(dtype).newbyteorder("<")
    if dt not in CODE_BY_DTYPE:
        raise DataError(f"dtype {np.dtype(dtype)} cannot be stored in a Megatron .bin file")
    return CODE_BY_DTYPE[dt]


class IndexedDataset:
    """A read-only, memory-mapped Megatron dataset (one `.bin/.idx` pair).

    Opening costs a header read and two memory maps; the index arrays are views into the mapped
    `.idx`, and tokens are views into the mapped `.bin`, so a multi-terabyte dataset opens
    instantly and only the pages a replay touches are read.
    """

    def __init__(
        self,
        prefix: str | os.PathLike[str],
        *,
        multimodal: bool = False,
        remote: str | None = None,
    ) -> None:
        self.prefix = Path(prefix)
        self.idx_file = idx_path(prefix)
        self.bin_file = bin_path(prefix)
        self.remote = remote
        self._remote_bin: Any = None
        if remote is not None:
            # megatron-core's object-storage path (dataloaders/megatron/remote.py): the .idx
            # cached at `prefix`, the .bin read by ranges; `bin_file` is then its identity stamp.
            self._remote_bin, self.bin_file = open_remote(remote, self.prefix)
        for path in (self.idx_file, self.bin_file):
            if not path.is_file():
                raise DataError(f"{path}: Megatron dataset file not found")
        self.idx_size = self.idx_file.stat().st_size
        self.bin_size = (
            self._remote_bin.size if self._remote_bin is not None else self.bin_file.stat().st_size
        )
        header = self._read_header()
        self.dtype: np.dtype[Any] = DTYPE_BY_CODE[header["code"]]
        self.dtype_code: int = header["code"]
        self.sequence_count: int = header["sequences"]
        self.document_count: int = header["documents"]  # boundaries, = number of documents + 1

        s, d = self.sequence_count, self.document_count
        needed = HEADER_SIZE + 4 * s + 8 * s + 8 * d + (s if multimodal else 0)
        if self.idx_size < needed:
            raise DataError(
                f"{self.idx_file}: truncated index: {self.idx_size} bytes, the header "
                f"({s} sequences, {d} document boundaries) needs {needed}"
            )
        self._idx_map = memmap(self.idx_file, np.uint8)
        off = HEADER_SIZE
        # sequence_lengths: int32[S], tokens per sequence
        self.sequence_lengths: np.ndarray = np.frombuffer(self._idx_map, "<i4", s, off)
        off += 4 * s
        # sequence_pointers: int64[S], byte offset of each sequence in .bin
        self.sequence_pointers: np.ndarray = np.frombuffer(self._idx_map, "<i8", s, off)
        off += 8 * s
        # document_indices: int64[D], first sequence of each document, plus the end (= S)
        self.document_indices: np.ndarray = np.frombuffer(self._idx_map, "<i8", d, off)
        off += 8 * d
        self.sequence_modes: np.ndarray | None = (
            np.frombuffer(self._idx_map, "<i1", s, off) if multimodal else None
        )
        self._check_consistency()
        self._bin_map: np.ndarray | None = None

    def _read_header(self) -> dict[str, int]:
        with open(self.idx_file, "rb") as stream:
            raw = stream.read(HEADER_SIZE)
        if len(raw) < len(MAGIC) or raw[: len(MAGIC)] != MAGIC:
            raise DataError(
                f"{self.idx_file}: not a Megatron index (wrong magic {raw[:9]!r}, "
                f"expected {MAGIC!r})"
            )
        if len(raw) < HEADER_SIZE:
            raise DataError(
                f"{self.idx_file}: truncated index: {len(raw)} bytes, the header alone is "
                f"{HEADER_SIZE}"
            )
        (version,) = struct.unpack_from("<Q", raw, 9)
        if version != VERSION:
            raise DataError(
                f"{self.idx_file}: unsupported index version {version} (only {VERSION} is known)"
            )
        code = raw[17]
        if code not in DTYPE_BY_CODE:
            raise DataError(
                f"{self.idx_file}: unsupported dtype code {code} (known: 1-8, Megatron's DType)"
            )
        sequences, documents = struct.unpack_from("<QQ", raw, 18)
        return {"code": code, "sequences": sequences, "documents": documents}

    def _check_consistency(self) -> None:
        """Cheap checks (O(1) reads) that catch truncation and mismatched .bin/.idx pairs, then
        the whole-index check once per version of the two files (checked.py)."""
        s = self.sequence_count
        if self.document_count < 1 or self.document_indices[0] != 0:
            raise DataError(f"{self.idx_file}: corrupt index: document indices must start at 0")
        if int(self.document_indices[-1]) != s:
            raise DataError(
                f"{self.idx_file}: corrupt index: last document boundary is "
                f"{int(self.document_indices[-1])}, expected the sequence count {s}"
            )
        if s == 0:
            return

        checked_once("idx-check", [self.idx_file, self.bin_file], self._check_arrays)

    def _check_arrays(self) -> dict[str, Any]:
        """The whole index, vectorised: a middle pointer or length changed, a wrong dtype code or
        a .bin from another dataset would otherwise decode to garbage without a word.

        Megatron's builder writes sequence_pointers as the running byte sum of the lengths from
        0 (IndexedDatasetBuilder / _IndexWriter), and the .bin is exactly that long.
        """
        lengths = self.sequence_lengths
        if (lengths < 0).any():
            bad = int(np.flatnonzero(lengths < 0)[0])
            raise DataError(f"{self.idx_file}: corrupt index: sequence {bad} has a negative length")
        expected = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1].astype(np.int64) * self.dtype.itemsize, out=expected[1:])
        wrong = np.flatnonzero(self.sequence_pointers != expected)
        if wrong.size:
            k = int(wrong[0])
            raise DataError(
                f"{self.idx_file}: corrupt index: sequence {k} points at byte "
                f"{int(self.sequence_pointers[k])}, the lengths before it put it at "
                f"{int(expected[k])} (index rewritten, or a wrong dtype code)"
            )
        end = int(self.sequence_pointers[-1]) + int(self.sequence_lengths[-1]) * self.dtype.itemsize
        if self.bin_size < end:
            raise DataError(
                f"{self.bin_name}: truncated data file: {self.bin_size} bytes, the index "
                f"({self.idx_file.name}) needs {end}"
            )
        if self.bin_size != end:
            raise DataError(
                f"{self.bin_name}: {self.bin_size} bytes, but its index ({self.idx_file.name}) "
                f"describes {end}: the .bin and .idx are not one pair (or the dtype code is wrong)"
            )
        steps = np.diff(self.document_indices)
        if (steps < 0).any():
            raise DataError(f"{self.idx_file}: corrupt index: document boundaries are not in order")
        return {}

    @property
    def bin_name(self) -> str:
        """The `.bin` as messages name it: its URL when it is in object storage."""
        return shown(f"{self.remote}.bin") if self.remote else str(self.bin_file)

    # -- sizes -----------------------------------------------------------------------------

    @property
    def num_documents(self) -> int:
        """Number of documents (= document_count - 1)."""
        return self.document_count - 1

    def __len__(self) -> int:
        """Number of sequences, as Megatron's `len(IndexedDataset)` (the unit its split uses)."""
        return self.sequence_count

    def document_token_counts(self) -> np.ndarray:
        """int64[documents]: tokens per document (sum over its sequences)."""
        cum = np.concatenate([[0], np.cumsum(self.sequence_lengths, dtype=np.int64)])
        return cum[self.document_indices[1:]] - cum[self.document_indices[:-1]]

    # -- tokens ----------------------------------------------------------------------------

    @property
    def tokens(self) -> np.ndarray:
        """The whole `.bin` as one memory-mapped 1-D array of the dataset's dtype."""
        if self._remote_bin is not None:
            if self._bin_map is None:
                count = self.bin_size // self.dtype.itemsize
                self._bin_map = RemoteArray(
                    self._remote_bin, self.dtype, count, rules="default-session"
                )
            return self._bin_map  # type: ignore[return-value]
        if self._bin_map is None:
            usable = self.bin_size - self.bin_size % self.dtype.itemsize
            if usable == 0:
                self._bin_map = np.zeros(0, dtype=self.dtype)
            else:
                self._bin_map = memmap(self.bin_file, self.dtype, (usable // self.dtype.itemsize,))
        return self._bin_map

    def read(self, first: int, count: int) -> np.ndarray:
        """Tokens [first, first + count) of the `.bin`, read from the file into a new array
        (megatron-core's own read without the map, `mmap_bin_files=False`: `_FileBinReader`,
        megatron-core 0.16.1 megatron/core/datasets/indexed_dataset.py:431). For
        scattered reads, such as one document here and another there: through the map each
        read maps its neighbourhood too (the page cache's large folios, up to megabytes), and
        a process decoding thousands of documents would hold most of the file."""
        if count <= 0:
            return np.zeros(0, dtype=self.dtype)
        if self._remote_bin is not None:
            return np.asarray(self.tokens[first : first + count])
        size = self.dtype.itemsize
        if getattr(self, "_bin_fd", None) is None:
            self._bin_fd = os.open(self.bin_file, os.O_RDONLY)
        data = os.pread(self._bin_fd, count * size, first * size)
        if len(data) != count * size:
            raise DataError(f"{self.bin_file}: tokens {first}..{first + count} past the end")
        return np.frombuffer(data, self.dtype)

    def __del__(self) -> None:
        fd = getattr(self, "_bin_fd", None)
        if fd is not None:
            os.close(fd)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_bin_fd", None)  # a descriptor means nothing in another process
        return state

    def get(self, idx: int, offset: int = 0, length: int | None = None) -> np.ndarray:
        """Tokens of sequence `idx` from `offset`, `length` of them (Megatron's `get`)."""
        seq_len = int(self.sequence_lengths[idx])
        if length is None:
            length = seq_len - offset
        if offset < 0 or length < 0 or offset + length > seq_len:
            raise IndexError(
                f"tokens [{offset}, {offset + length}) outside sequence {idx} of {seq_len}"
            )
        start = int(self.sequence_pointers[idx]) + offset * self.dtype.itemsize
        if start % self.dtype.itemsize:
            # A pointer not aligned to the dtype: read through a byte view (Megatron allows it).
            if self._remote_bin is not None:
                data = self.tokens.read_bytes(start, start + length * self.dtype.itemsize)
                return np.frombuffer(data, self.dtype)
            raw = memmap(self.bin_file, np.uint8)
            return np.frombuffer(raw, self.dtype, length, start)
        first = start // self.dtype.itemsize
        return self.tokens[first : first + length]

    def __getitem__(self, idx: int) -> np.ndarray:
        return self.get(int(idx))

    def idx_digest(self) -> str:
        """sha256 of the whole `.idx` (small next to `.bin`): identifies the tokenized data, also
        when a file is rewritten at the same size with its mtime restored. Computed once per
        version of the file (dataloaders/megatron/checked.py)."""
        import hashlib

        if getattr(self, "_idx_digest", None):
            return self._idx_digest

        def sha256() -> dict[str, Any]:
            digest = hashlib.sha256()
            with open(self.idx_file, "rb") as stream:
                for block in iter(lambda: stream.read(1 << 22), b""):
                    digest.update(block)
            return {"sha256": digest.hexdigest()}

        self._idx_digest: str = str(checked_once("idx-sha256", [self.idx_file], sha256)["sha256"])
        return self._idx_digest


class IndexedDatasetWriter:
    """Write a `.bin/.idx` pair byte-identical to megatron-core's `IndexedDatasetBuilder`.

    Both files are written under temporary names and renamed on `finalize()`, so a crash never
    leaves a half-written dataset that a later replay would trust. Use as a context manager:

        with IndexedDatasetWriter("data/web_text_document", np.uint16) as out:
            for tokens in docs:
                out.add_document(tokens)
    """

    def __init__(self, prefix: str | os.PathLike[str], dtype: Any = np.int32) -> None:
        self.prefix = Path(prefix)
        self.dtype = np.dtype(dtype).newbyteorder("<")
        self.code = dtype_code(self.dtype)
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        self._bin_tmp = bin_path(prefix).with_name(bin_path(prefix).name + ".tmp")
        self._idx_tmp = idx_path(prefix).with_name(idx_path(prefix).name + ".tmp")
        self._bin = open(self._bin_tmp, "wb")
        self.sequence_lengths: list[int] = []
        self.document_indices: list[int] = [0]
        self._done = False

    def add_item(self, tokens: Iterable[int] | np.ndarray) -> None:
        """Append one sequence (call `end_document` after a document's sequences)."""
        arr = np.asarray(tokens, dtype=self.dtype).ravel()
        self._bin.write(arr.tobytes(order="C"))
        self.sequence_lengths.append(int(arr.size))

    def end_document(self) -> None:
        """Close the current document (Megatron's `end_document`)."""
        self.document_indices.append(len(self.sequence_lengths))

    def add_document(
        self, tokens: Iterable[int] | np.ndarray, lengths: list[int] | None = None
    ) -> None:
        """Append a whole document; `lengths` splits it into sentences (default: one sequence)."""
        arr = np.asarray(tokens, dtype=self.dtype).ravel()
        if lengths is None:
            lengths = [int(arr.size)]
        if sum(lengths) != arr.size:
            raise ValueError(f"sequence lengths {lengths} do not add up to {arr.size} tokens")
        self._bin.write(arr.tobytes(order="C"))
        self.sequence_lengths.extend(int(n) for n in lengths)
        self.document_indices.append(len(self.sequence_lengths))

    def finalize(self) -> None:
        """Write the index and move both files into place."""
        if self._done:
            return
        self._bin.close()
        write_idx(self._idx_tmp, self.sequence_lengths, self.document_indices, self.dtype)
        os.replace(self._bin_tmp, bin_path(self.prefix))
        os.replace(self._idx_tmp, idx_path(self.prefix))
        self._done = True

    def abort(self) -> None:
        """Drop the temporary files (nothing half-written is left behind)."""
        self._bin.close()
        for tmp in (self._bin_tmp, self._idx_tmp):
            tmp.unlink(missing_ok=True)
        self._done = True

    def __enter__(self) -> IndexedDatasetWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.finalize()
        else:
            self.abort()


def write_idx(
    path: str | os.PathLike[str],
    sequence_lengths: Any,
    document_indices: Any,
    dtype: Any,
) -> None:
    """Write a `.idx` for sequences stored back to back in a `.bin` of `dtype`."""
    dt = np.dtype(dtype).newbyteorder("<")
    lengths = np.asarray(sequence_lengths, dtype="<i4")
    pointers = np.zeros(lengths.size, dtype="<i8")
    if lengths.size:
        np.cumsum(lengths[:-1].astype("<i8") * dt.itemsize, out=pointers[1:])
    with open(path, "wb") as idx:
        idx.write(MAGIC)
        idx.write(struct.pack("<Q", VERSION))
        idx.write(struct.pack("<B", dtype_code(dt)))
        idx.write(struct.pack("<Q", lengths.size))
        idx.write(struct.pack("<Q", len(document_indices)))
        idx.write(lengths.tobytes())
        idx.write(pointers.tobytes())
        idx.write(np.asarray(document_indices, dtype="<i8").tobytes())


def write_indexed_dataset(
    prefix: str | os.PathLike[str], documents: Iterable[Iterable[int] | np.ndarray], dtype: Any
) -> Path:
    """Write documents (one token array each) as a Megatron dataset; returns the prefix."""
    with IndexedDatasetWriter(prefix, dtype) as out:
        for doc in documents:
            out.add_document(doc)
    return Path(prefix)
