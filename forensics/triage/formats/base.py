"""What a training-log format is to `forensics triage` and `forensics watch`: one `LogFormat`
object per format, each in its own module here, listed once in `forensics.triage.formats`.

The shape is the loader families' (`dataloaders.family_base`): the code that reads a log (triage's
`read_log`, watch's `ChunkParser`, format detection) names no format; it asks the format object.
A format answers:

- its name (`--format` value, the name `events.json` and the watch state record);
- whether it recognises a log: from the file name alone (`named`), from the first bytes
  (`recognises`, handed a `Head`), or a directory (`holds_directory`);
- how to read a whole log into a raw table (`read`, with the unit its `__line` column counts);
- how `forensics watch` follows it as the trainer appends: line by line (`grows`, then
  `parse_lines` on each batch of new lines, with the `LineState` it keeps between batches), as
  event records (`follows_events`), or not at all (a file rewritten whole).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import ClassVar

import polars as pl


@dataclass
class Head:
    """The first bytes of a log file (up to 4 MB), what detection looks at; its text and first
    line are decoded once, whichever formats ask."""

    path: Path
    data: bytes

    @property
    def name(self) -> str:
        return self.path.name.lower()

    @cached_property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")

    @cached_property
    def first(self) -> str:
        """The first line that is neither blank nor a `#` comment ("" when none)."""
        lines = self.text.splitlines()
        return next((ln for ln in lines if ln.strip() and not ln.startswith("#")), "")


@dataclass
class LineState:
    """What `forensics watch` keeps between two batches of a log's new lines.

    path    the log (warnings name it)
    notes   line-level warnings, in the order they were found
    header  what the format holds back between batches (a CSV's header line; OLMo-core's newest
            record, as JSON, until the next marker shows it is complete); saved with the watch
            state so a restarted watcher continues where it stopped
    """

    path: Path
    notes: list[str] = field(default_factory=list)
    header: str | None = None


class LogFormat(ABC):
    """One training-log format. Subclasses set `name` and implement `read`; the rest are
    capabilities with their default (see the module docstring)."""

    name: ClassVar[str]
    reads_directory: ClassVar[bool] = False  # a run directory, not one file (TensorBoard)
    grows: ClassVar[bool] = False  # appended as the job trains: `forensics watch` follows it
    follows_events: ClassVar[bool] = False  # watch reads event records, not lines
    header_first: ClassVar[bool] = False  # its first line may be a header (or a preamble)

    def named(self, name: str) -> bool:
        """True when the file name (lower case) alone says the format."""
        return False

    def recognises(self, head: Head) -> bool:
        """True when the log's first bytes are this format's. May refuse in one line when the
        head is this format's but cannot be read yet (an OLMo-core log without metrics)."""
        return False

    def holds_directory(self, path: Path) -> bool:
        """True when a directory is a run of this format (`reads_directory` formats)."""
        return False

    @abstractmethod
    def read(self, path: Path, notes: list[str]) -> tuple[pl.DataFrame, str]:
        """(raw table, unit): the original field names as string or number columns and a
        `__line` column saying where each row came from; `unit` names what `__line` counts
        ("line", "log_history entry", "step") in warnings. Problems: ForensicsError, or a
        note in `notes` when the rest of the log is usable."""

    def watched_as(self) -> LogFormat:
        """The format whose line parser reads this one's new lines (itself by default)."""
        return self

    def parse_lines(self, lines: list[tuple[int, str]], state: LineState) -> pl.DataFrame | None:
        """The raw rows of a batch of new (line number, text) lines (`grows` formats)."""
        raise NotImplementedError(f"{self.name} logs are not followed line by line")

    def help_order(self) -> int:
        """Where `forensics watch --format`'s help lists the format: line formats, then event
        formats (the rest are not listed)."""
        return 1 if self.follows_events else 0
