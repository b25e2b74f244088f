"""Read TFRecord files (TensorBoard event files) record by record, every CRC checked.

Why not tensorboard's own loader: on a CRC mismatch its `RawEventFileLoader` logs at debug level
and stops reading the file (tensorboard/backend/event_processing/event_file_loader.py, the
`except tf.errors.DataLossError: break` in `Load`), so one flipped byte in the middle of a file
silently drops every point after it. Here a record whose data CRC fails is counted and skipped
(its length was intact, so the next record is found); a record whose length CRC fails is counted
and the reader resynchronises on the next offset whose header CRC checks out. The caller reports
the counts.

Format (tensorflow/core/lib/io/record_writer.cc): uint64 length, uint32 masked_crc32c(length),
`length` bytes of data, uint32 masked_crc32c(data), all little-endian.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from dataloaders.regular_files import open_regular

_MASK_DELTA = 0xA282EAD8
# A record longer than this is not an event (Megatron's scalars are ~100 bytes; images ~MBs).
_MAX_RECORD = 1 << 30


@functools.cache
def _crc32c() -> Callable[[bytes], int]:
    """The fastest crc32c available (google-crc32c's C code; else tensorboard's pure Python)."""
    try:
        import google_crc32c

        return lambda data: google_crc32c.value(bytes(data))
    except ImportError:
        from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import crc32c

        return crc32c


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC: rotate right by 15 and add a constant (record_writer.h)."""
    crc = _crc32c()(data) & 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


@dataclass
class RecordScan:
    """What reading one file found besides its good records."""

    good: int = 0
    bad_data_crc: int = 0
    bad_header_crc: int = 0
    skipped_bytes: int = 0
    not_events: int = 0
    end: int = 0  # offset after the last record consumed (where a follower resumes)
    first_bad_offset: int | None = None
    truncated_at: int | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def unreadable(self) -> int:
        return self.bad_data_crc + self.bad_header_crc


def _header_ok(buf: bytes | memoryview, off: int, size: int) -> int | None:
    """The record length at `off` if its header CRC is right, else None."""
    if off + 12 > size:
        return None
    head = bytes(buf[off : off + 8])
    (crc,) = struct.unpack_from("<I", buf, off + 8)
    if masked_crc32c(head) != crc:
        return None
    (length,) = struct.unpack("<Q", head)
    return length if length <= _MAX_RECORD else None


def iter_records(path: Path, scan: RecordScan, start: int = 0) -> Iterator[bytes]:
    """Yield the data of every record from byte `start` whose CRCs check out; count the rest in
    `scan`; `scan.end` is where the next read resumes (a truncated tail is read again then)."""
    with open_regular(path) as fh:  # an events file is never a FIFO we would wait on
        fh.seek(start)
        buf = memoryview(fh.read())
    size, off = len(buf), 0
    scan.end = start
    while off < size:
        scan.end = start + off
        if size - off < 12:
            scan.truncated_at = start + off
            return
        length = _header_ok(buf, off, size)
        if length is None:
            scan.bad_header_crc += 1
            if scan.first_bad_offset is None:
                scan.first_bad_offset = start + off
            nxt = _resync(buf, off + 1, size)
            if nxt is None:  # nothing good after it (yet): a follower looks here again
                scan.skipped_bytes += size - off
                return
            scan.skipped_bytes += nxt - off
            off = nxt
            continue
        end = off + 12 + length + 4
        if end > size:
            scan.truncated_at = start + off
            return
        data = bytes(buf[off + 12 : off + 12 + length])
        (crc,) = struct.unpack_from("<I", buf, off + 12 + length)
        if masked_crc32c(data) != crc:
            scan.bad_data_crc += 1
            if scan.first_bad_offset is None:
                scan.first_bad_offset = start + off
        else:
            scan.good += 1
            yield data
        off = end
    scan.end = start + off


def _resync(buf: memoryview, start: int, size: int) -> int | None:
    """The next offset holding a whole record with both CRCs right (after a corrupt header)."""
    for off in range(start, size - 12):
        (length,) = struct.unpack_from("<Q", buf, off)
        if off + 16 + length > size:  # cheap filter before the CRC
            continue
        length = _header_ok(buf, off, size)
        if length is None or off + 16 + length > size:
            continue
        (crc,) = struct.unpack_from("<I", buf, off + 12 + length)
        if masked_crc32c(bytes(buf[off + 12 : off + 12 + length])) == crc:
            return off
    return None
