"""A 1-D numpy view of a remote object, read by byte ranges (megatron-core's `_S3BinReader`,
Megatron-LM core 0.16.1 `megatron/core/datasets/indexed_dataset.py:500-579`, reads its `.bin`
the same way: `get_object(Range=...)` over aligned blocks).

Megatron's block is 256 MiB (`ObjectStorageConfig.bin_chunk_nbytes`, object_storage_utils.py:39):
right for a trainer that reads the whole file in order, too coarse for a replay that reads a
window's documents. Here blocks are FORENSICS_STORAGE_BLOCK_BYTES (default 1 MiB), neighbours
are fetched in one request, and the most recent blocks (256 MiB at most) are kept, so the bytes
fetched follow the documents the window touches.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from dataloaders.storage.clients import Rules
from dataloaders.storage.objects import ObjectInfo, read_range

KEEP_BYTES = 256 << 20


def block_bytes() -> int:
    raw = os.environ.get("FORENSICS_STORAGE_BLOCK_BYTES")
    return max(1, int(raw)) if raw else 1 << 20


class RemoteArray:
    """`count` items of `dtype` at byte `offset` of a remote object, sliced like an array."""

    ndim = 1

    def __init__(
        self,
        info: ObjectInfo,
        dtype: Any,
        count: int,
        offset: int = 0,
        rules: Rules = "scheme-profiles",
    ) -> None:
        self.info = info
        self.dtype = np.dtype(dtype)
        self.count = count
        self.offset = offset
        self.rules = rules
        self.block = block_bytes()
        self._blocks: OrderedDict[int, bytes] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def shape(self) -> tuple[int]:
        return (self.count,)

    @property
    def size(self) -> int:
        return self.count

    def __len__(self) -> int:
        return self.count

    def read_bytes(self, start: int, stop: int) -> bytes:
        """Bytes [start, stop) of the object, through the block cache."""
        if stop <= start:
            return b""
        first, last = start // self.block, (stop - 1) // self.block
        with self._lock:
            missing = [b for b in range(first, last + 1) if b not in self._blocks]
            run_start = 0
            for i, b in enumerate(missing):
                if i == 0 or b != missing[i - 1] + 1:
                    run_start = b
                if i + 1 == len(missing) or missing[i + 1] != b + 1:
                    self._fetch(run_start, b)
            parts = []
            for b in range(first, last + 1):
                self._blocks.move_to_end(b)
                parts.append(self._blocks[b])
            self._trim()
        data = b"".join(parts)
        base = first * self.block
        return data[start - base : stop - base]

    def _fetch(self, first: int, last: int) -> None:
        lo = first * self.block
        hi = min(self.info.size, (last + 1) * self.block)
        data = read_range(self.info, lo, hi, self.rules)
        for b in range(first, last + 1):
            self._blocks[b] = data[(b - first) * self.block : (b - first + 1) * self.block]

    def _trim(self) -> None:
        while len(self._blocks) * self.block > KEEP_BYTES and len(self._blocks) > 1:
            self._blocks.popitem(last=False)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            start, stop, step = key.indices(self.count)
            if step != 1:
                return np.asarray(self)[key]
            stop = max(start, stop)
            raw = self.read_bytes(
                self.offset + start * self.dtype.itemsize, self.offset + stop * self.dtype.itemsize
            )
            return np.frombuffer(raw, self.dtype)
        if isinstance(key, int | np.integer):
            i = int(key) + (self.count if key < 0 else 0)
            if not 0 <= i < self.count:
                raise IndexError(f"index {int(key)} out of range for {self.count} items")
            return self[i : i + 1][0]
        return np.asarray(self)[key]

    def gather(self, begins: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Only the items of the runs [begins[i], begins[i] + lengths[i]): (a compact array
        holding them, each run's start in it). Overlapping or touching runs are read once."""
        begins = np.asarray(begins, dtype=np.int64)
        ends = begins + np.asarray(lengths, dtype=np.int64)
        order = np.argsort(begins, kind="stable")
        merged: list[list[int]] = []
        for b, e in zip(begins[order].tolist(), ends[order].tolist(), strict=True):
            if merged and b <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([b, e])
        parts = [self[b:e] for b, e in merged]
        base = np.zeros(len(merged), dtype=np.int64)
        if merged:
            np.cumsum([e - b for b, e in merged[:-1]], out=base[1:])
        starts = np.array([b for b, _ in merged], dtype=np.int64)
        which = np.searchsorted(starts, begins, side="right") - 1
        compact = np.concatenate(parts) if parts else np.zeros(0, self.dtype)
        return compact, base[which] + begins - starts[which]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        whole = self[0 : self.count]
        return whole.astype(dtype) if dtype is not None else whole
