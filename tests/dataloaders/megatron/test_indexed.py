"""The .bin/.idx reader and writer, against megatron-core's own IndexedDataset(Builder)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import random_documents

from dataloaders.megatron.indexed import (
    DTYPE_BY_CODE,
    IndexedDataset,
    IndexedDatasetWriter,
    optimal_dtype,
    write_indexed_dataset,
)
from forensics.errors import ForensicsError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _values(rng: np.random.Generator, dtype: np.dtype, n: int) -> np.ndarray:
    if dtype.kind == "f":
        return rng.standard_normal(n).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, int(info.max) + 1, size=n, dtype=np.int64).astype(dtype)


@pytest.mark.parametrize("code", sorted(DTYPE_BY_CODE))
def test_every_dtype_code_round_trips_with_megatron(tmp_path: Path, megatron, code: int) -> None:
    dtype = DTYPE_BY_CODE[code]
    rng = np.random.default_rng(code)
    docs = [_values(rng, dtype, int(n)) for n in rng.integers(1, 50, size=17)]

    ours = write_indexed_dataset(tmp_path / "ours", docs, dtype)
    builder = megatron.indexed.IndexedDatasetBuilder(str(tmp_path / "theirs.bin"), dtype=dtype.type)
    for doc in docs:
        builder.add_document(torch.from_numpy(doc.copy()), [len(doc)])
    builder.finalize(str(tmp_path / "theirs.idx"))

    # Byte-identical files.
    assert (tmp_path / "ours.idx").read_bytes() == (tmp_path / "theirs.idx").read_bytes()
    assert (tmp_path / "ours.bin").read_bytes() == (tmp_path / "theirs.bin").read_bytes()

    # Theirs reads ours; ours reads theirs.
    theirs_reader = megatron.indexed.IndexedDataset(str(ours))
    ours_reader = IndexedDataset(tmp_path / "theirs")
    assert ours_reader.dtype_code == code
    assert ours_reader.num_documents == len(docs)
    for i, doc in enumerate(docs):
        np.testing.assert_array_equal(theirs_reader[i], doc)
        np.testing.assert_array_equal(ours_reader[i], doc)
        if len(doc) >= 4:
            np.testing.assert_array_equal(ours_reader.get(i, 1, 3), theirs_reader.get(i, 1, 3))
    np.testing.assert_array_equal(ours_reader.sequence_lengths, theirs_reader.sequence_lengths)
    np.testing.assert_array_equal(ours_reader.document_indices, theirs_reader.document_indices)


def test_split_sentences_documents(tmp_path: Path, megatron) -> None:
    """Documents of several sequences (--split-sentences): boundaries and token counts."""
    rng = np.random.default_rng(1)
    with IndexedDatasetWriter(tmp_path / "s", np.uint16) as out:
        out.add_document(np.arange(10), lengths=[3, 7])
        out.add_item(rng.integers(0, 100, 4))
        out.add_item(rng.integers(0, 100, 5))
        out.end_document()
        out.add_document(np.arange(2))
    ds = IndexedDataset(tmp_path / "s")
    theirs = megatron.indexed.IndexedDataset(str(tmp_path / "s"))
    assert len(ds) == len(theirs) == 5
    np.testing.assert_array_equal(ds.document_indices, [0, 2, 4, 5])
    np.testing.assert_array_equal(ds.document_token_counts(), [10, 9, 2])
    np.testing.assert_array_equal(ds.get(1), theirs.get(1))


def test_optimal_dtype_matches_megatron(megatron) -> None:
    for vocab in (100, 65499, 65500, 128256, None):
        assert optimal_dtype(vocab).type == megatron.indexed.DType.optimal_dtype(vocab)


def test_large_random_dataset_matches(tmp_path: Path, megatron) -> None:
    rng = np.random.default_rng(7)
    docs = random_documents(rng, 500, 50_000)
    write_indexed_dataset(tmp_path / "big", docs, np.uint16)
    ours = IndexedDataset(tmp_path / "big")
    theirs = megatron.indexed.IndexedDataset(str(tmp_path / "big"))
    np.testing.assert_array_equal(ours.sequence_pointers, theirs.index.sequence_pointers)
    picks = rng.integers(0, 500, 50)
    for i in picks:
        np.testing.assert_array_equal(ours[i], theirs[int(i)])


def test_read_from_the_file_matches_megatron_without_its_map(tmp_path: Path, megatron) -> None:
    """`read` (pread, no map kept: the decode of scattered documents) gives the tokens
    megatron-core's own file reader gives (IndexedDataset(mmap=False): _FileBinReader)."""
    rng = np.random.default_rng(11)
    write_indexed_dataset(tmp_path / "big", random_documents(rng, 300, 20_000), np.int32)
    ours = IndexedDataset(tmp_path / "big")
    theirs = megatron.indexed.IndexedDataset(str(tmp_path / "big"), mmap=False)
    for i in rng.integers(0, 300, 40):
        first = int(ours.sequence_pointers[i]) // ours.dtype.itemsize
        length = int(ours.sequence_lengths[i])
        np.testing.assert_array_equal(ours.read(first, length), theirs[int(i)])
        offset = length // 3
        np.testing.assert_array_equal(
            ours.read(first + offset, length - offset), theirs.get(int(i), offset=offset)
        )
    assert ours.read(0, 0).size == 0
    with pytest.raises(ForensicsError, match="past the end"):
        ours.read(ours.bin_size // ours.dtype.itemsize - 1, 2)


# -- bad input -------------------------------------------------------------------------------


@pytest.fixture
def small(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    return write_indexed_dataset(tmp_path / "small", random_documents(rng, 20, 1000), np.uint16)


def _error(prefix: Path) -> str:
    with pytest.raises(ForensicsError) as info:
        IndexedDataset(prefix)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_missing_files(small: Path) -> None:
    Path(f"{small}.bin").unlink()
    assert "small.bin" in _error(small) and "not found" in _error(small)
    assert "nothing.idx" in _error(small.parent / "nothing")


def test_wrong_magic(small: Path) -> None:
    idx = Path(f"{small}.idx")
    data = bytearray(idx.read_bytes())
    data[:9] = b"NOTMEGATR"
    idx.write_bytes(bytes(data))
    message = _error(small)
    assert "small.idx" in message and "magic" in message


def test_foreign_file(small: Path) -> None:
    Path(f"{small}.idx").write_text('{"this": "is json"}')
    assert "magic" in _error(small)


def test_unsupported_version_and_dtype(small: Path) -> None:
    idx = Path(f"{small}.idx")
    good = idx.read_bytes()
    idx.write_bytes(good[:9] + struct.pack("<Q", 2) + good[17:])
    assert "version 2" in _error(small)
    idx.write_bytes(good[:17] + bytes([9]) + good[18:])
    assert "dtype code 9" in _error(small)


def test_truncated_idx(small: Path) -> None:
    idx = Path(f"{small}.idx")
    good = idx.read_bytes()
    idx.write_bytes(good[:-8])
    assert "truncated index" in _error(small)
    idx.write_bytes(good[:20])
    assert "truncated index" in _error(small)


def test_truncated_bin(small: Path) -> None:
    binf = Path(f"{small}.bin")
    binf.write_bytes(binf.read_bytes()[:-2])
    message = _error(small)
    assert "small.bin" in message and "truncated data" in message


def test_middle_pointer_or_length_changed(small: Path) -> None:
    idx = Path(f"{small}.idx")
    good = bytearray(idx.read_bytes())
    lengths_at, count = 34, 20
    pointers_at = lengths_at + 4 * count
    edited = bytearray(good)
    struct.pack_into("<q", edited, pointers_at + 8 * 10, 2)  # pointer of sequence 10
    idx.write_bytes(bytes(edited))
    assert "sequence 10 points at byte 2" in _error(small)
    edited = bytearray(good)
    (length,) = struct.unpack_from("<i", edited, lengths_at + 4 * 5)
    struct.pack_into("<i", edited, lengths_at + 4 * 5, length + 1)  # length of sequence 5
    idx.write_bytes(bytes(edited))
    assert "sequence 6 points at byte" in _error(small)


def test_wrong_dtype_code_and_foreign_bin(small: Path, tmp_path: Path) -> None:
    idx = Path(f"{small}.idx")
    good = idx.read_bytes()
    idx.write_bytes(good[:17] + bytes([4]) + good[18:])  # int32 instead of uint16
    assert "wrong dtype code" in _error(small)
    idx.write_bytes(good)
    rng = np.random.default_rng(1)
    other = write_indexed_dataset(tmp_path / "other", random_documents(rng, 40, 1000), np.uint16)
    Path(f"{small}.bin").write_bytes(Path(f"{other}.bin").read_bytes())
    assert "are not one pair" in _error(small)


def test_writer_leaves_nothing_on_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError):
        with IndexedDatasetWriter(tmp_path / "x", np.int32) as out:
            out.add_document([1, 2, 3])
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
