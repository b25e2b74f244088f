"""Whole-file checks run once per file version (dataloaders/megatron/checked.py): a stamp skips
them on the next open, and any change to the file, including one that restores its size and
mtime, checks again."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from dataloaders.errors import DataError
from dataloaders.megatron import checked
from dataloaders.megatron.indexed import IndexedDataset, write_idx


@pytest.fixture
def later(monkeypatch: pytest.MonkeyPatch) -> None:
    """Checks start as if the files were written minutes ago (past the settling time)."""
    monkeypatch.setattr(checked, "clock", lambda: time.time() + 3 * checked.SETTLE_SECONDS)


def _dataset(tmp_path: Path, lengths: list[int]) -> Path:
    prefix = tmp_path / "data"
    sizes = np.array(lengths, dtype=np.int32)
    write_idx(f"{prefix}.idx", sizes, np.arange(len(sizes) + 1), np.uint16)
    Path(f"{prefix}.bin").write_bytes(b"\0" * (2 * int(sizes.sum())))
    return prefix


def test_a_settled_file_is_checked_once(tmp_path: Path, later: None) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    calls: list[int] = []

    def check() -> dict:
        calls.append(1)
        return {"n": len(calls)}

    assert checked.checked_once("t", [path], check) == {"n": 1}
    assert checked.checked_once("t", [path], check) == {"n": 1}
    assert len(calls) == 1
    # Rewritten at the same size with its mtime put back: ctime moved, so it is checked again.
    stat = path.stat()
    path.write_bytes(b"xyz")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert checked.checked_once("t", [path], check) == {"n": 2}


def test_a_fresh_file_is_not_stamped_unless_we_wrote_it(tmp_path: Path) -> None:
    """A file changed moments ago could change again within the same clock tick unseen."""
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    calls: list[int] = []

    def check() -> dict:
        calls.append(1)
        return {}

    checked.checked_once("t", [path], check)
    checked.checked_once("t", [path], check)
    assert len(calls) == 2
    checked.checked_once("own", [path], check, trusted=True)
    checked.checked_once("own", [path], check, trusted=True)
    assert len(calls) == 3


def test_a_failed_check_is_never_stamped(tmp_path: Path, later: None) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    calls: list[int] = []

    def check() -> dict:
        calls.append(1)
        return {"problem": "bad"}

    for _ in range(2):
        assert checked.checked_once("t", [path], check)["problem"] == "bad"
    assert len(calls) == 2


def test_an_index_damaged_after_its_stamp_is_refused(tmp_path: Path, later: None) -> None:
    """The whole-index check of IndexedDataset is stamped; a later in-place edit of the .idx
    (a pointer moved, same size, mtime restored) is checked again and refused."""
    prefix = _dataset(tmp_path, [3, 4, 5])
    idx = Path(f"{prefix}.idx")
    digest = IndexedDataset(prefix).idx_digest()
    assert checked.read_stamp("idx-check", [idx, Path(f"{prefix}.bin")]) == {}
    stat = idx.stat()
    data = bytearray(idx.read_bytes())
    pointers = 34 + 4 * 3  # header, then int32 lengths, then int64 pointers
    data[pointers + 8] ^= 2  # sequence 1's pointer
    idx.write_bytes(bytes(data))
    os.utime(idx, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(DataError, match="points at byte"):
        IndexedDataset(prefix)
    # Another valid index at the same path: a new version, so a new digest.
    _dataset(tmp_path, [3, 4, 6])
    assert IndexedDataset(prefix).idx_digest() != digest
