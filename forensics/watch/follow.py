"""Follow a growing log file like `tail -F`, but resumable and honest about what happened.

Per poll only the bytes appended since the last one are read (work grows with the new lines,
never with the log). A last line without its newline is left for the next poll (the trainer is
mid-write). Rotation (the path now names another file: `mv train.log train.log.1`, a new
`train.log`) drains the old file through the still-open handle, then follows the new one from its
start; truncation (`copytruncate`, or the job restarted with `>`) starts over from byte 0. The
position (device, inode, offset, line number and a hash of the file's first bytes) is what a
restarted watcher resumes from.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from dataloaders.regular_files import open_regular

BinaryIO = IO[bytes]

_HEAD_BYTES = 256
_MAX_PARTIAL = 1 << 20  # a "line" this long without a newline is taken as one (bounded memory)
_MAX_READ = 64 << 20  # at most this much per poll; the rest waits for the next one


@dataclass
class Position:
    """Where the follower stands in the file it follows (persisted between watcher runs)."""

    dev: int = 0
    ino: int = 0
    offset: int = 0
    line_no: int = 0
    head: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Position:
        return cls(**{k: d[k] for k in ("dev", "ino", "offset", "line_no", "head") if k in d})


def _head_hash(fh: BinaryIO) -> str:
    fh.seek(0)
    return hashlib.sha1(fh.read(_HEAD_BYTES)).hexdigest()


class LogFollower:
    """New complete lines of one log path, across rotation and truncation."""

    def __init__(self, path: Path, position: Position | None = None) -> None:
        self.path = path
        self.pos = position or Position()
        self._fh: BinaryIO | None = None
        self.notes: list[str] = []
        self.bytes_read = 0

    # ------------------------------------------------------------------ opening and identity

    def _open(self, resume: bool) -> bool:
        try:
            fh = open_regular(self.path)  # kept open across polls on purpose
        except FileNotFoundError:
            return False
        st = os.fstat(fh.fileno())
        head = _head_hash(fh)
        same = (
            resume
            and (st.st_dev, st.st_ino) == (self.pos.dev, self.pos.ino)
            and st.st_size >= self.pos.offset
            and (self.pos.offset < _HEAD_BYTES or head == self.pos.head)
        )
        if resume and self.pos.ino and not same:
            self.notes.append(
                f"{self.path}: not the file this watcher last read (rotated, truncated or "
                "replaced while it was down): reading it from the start"
            )
        if not same:
            self.pos = Position(dev=st.st_dev, ino=st.st_ino, offset=0, line_no=0, head=head)
        self._fh = fh
        return True

    def _identity_changed(self) -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False  # rotated away, the new file not created yet: keep draining the old
        return (st.st_dev, st.st_ino) != (self.pos.dev, self.pos.ino)

    # ------------------------------------------------------------------ reading

    def poll(self) -> list[list[tuple[int, str]]]:
        """The complete lines appended since the last poll, as (line number, text) pairs, in one
        batch per file (a rotated file's tail, then the new file: parsed separately)."""
        if self._fh is None and not self._open(resume=True):
            return []
        assert self._fh is not None
        batches: list[list[tuple[int, str]]] = []
        if self._identity_changed():
            batches.append(self._read_new(final=True))  # the rest of the rotated file
            self._fh.close()
            self._fh = None
            self.notes.append(f"{self.path}: rotated (a new file at the path); following it")
            self.pos = Position()
            if not self._open(resume=False):
                return [b for b in batches if b]
            assert self._fh is not None
        size = os.fstat(self._fh.fileno()).st_size
        if size < self.pos.offset:
            self.notes.append(
                f"{self.path}: truncated from {self.pos.offset} to {size} bytes; reading it from "
                "the start"
            )
            self.pos.offset, self.pos.line_no = 0, 0
        batches.append(self._read_new(final=False))
        if self.pos.offset and (not self.pos.head or self.pos.offset <= 2 * _HEAD_BYTES):
            self.pos.head = _head_hash(self._fh)
        return [b for b in batches if b]

    def _read_new(self, final: bool) -> list[tuple[int, str]]:
        """Lines from the offset on; `final`: the file will not grow again (rotated away), so
        read it to the end and take an unterminated last line as complete."""
        assert self._fh is not None
        out: list[tuple[int, str]] = []
        while True:
            self._fh.seek(self.pos.offset)
            data = self._fh.read(_MAX_READ)
            self.bytes_read += len(data)
            if not data:
                return out
            cut = data.rfind(b"\n") + 1
            if (final and len(data) < _MAX_READ) or len(data) - cut >= _MAX_PARTIAL:
                cut = len(data)
            self.pos.offset += cut
            texts = data[:cut].decode("utf-8", errors="replace").split("\n")
            if texts and texts[-1] == "":
                texts.pop()
            first = self.pos.line_no + 1
            self.pos.line_no += len(texts)
            out += [(first + i, t.rstrip("\r")) for i, t in enumerate(texts)]
            if not final or cut == 0:
                return out

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
