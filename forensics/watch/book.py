"""The watcher's memory: every message it raised, in `events.jsonl`, is what it never repeats.

`events.jsonl` is both a sink and the registry. Each message is one line written with a single
`write` on an `O_APPEND` descriptor and fsynced, so a reader sees whole lines only and a killed
watcher leaves at most a torn last line, which the next start cuts off. A restarted watcher reads
the file back, re-analyses the log, and raises exactly the messages that are not in it yet:
nothing lost, nothing repeated.

Identity of an event across polls (its onset can move a row or two as rows arrive, and a sliding
window sees a slightly different history): same kind and curve, and overlapping step ranges
(within a few logged rows for spikes and alarms). A spike is one event with up to three
messages: raised (often undecided), then each new verdict.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forensics.errors import ForensicsError
from forensics.triage.report import json_safe

EVENTS_FILE = "events.jsonl"


@dataclass
class Known:
    """One event already raised (rebuilt from events.jsonl on start)."""

    kind: str
    curve: str | None
    step: int
    end_step: int
    verdicts: set[str] = field(default_factory=set)
    seq: int = 0


class EventBook:
    """Append-only message log plus the identities of the events it holds."""

    def __init__(self, out: Path) -> None:
        self.path = out / EVENTS_FILE
        self.messages: list[dict[str, Any]] = []
        self.known: list[Known] = []
        out.mkdir(parents=True, exist_ok=True)
        self._load()

    def _load(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        cut = data.rfind(b"\n") + 1
        if cut < len(data):  # a torn last line from a killed watcher
            with open(self.path, "r+b") as fh:
                fh.truncate(cut)
        for i, line in enumerate(data[:cut].decode("utf-8", errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                raise ForensicsError(
                    f"{self.path}: line {i} is not JSON; this is not a watch directory's event "
                    "log (use another --out or move the file away)"
                ) from None
            self.messages.append(msg)
            self._remember(msg)

    @property
    def next_seq(self) -> int:
        return len(self.messages) + 1

    def _remember(self, msg: dict[str, Any]) -> None:
        if msg.get("message") not in ("raised", "verdict"):
            return
        k = self.find(msg["kind"], msg.get("curve"), msg["step"], msg.get("end_step"), 0)
        if k is None:
            k = Known(
                msg["kind"], msg.get("curve"), msg["step"], msg.get("end_step") or msg["step"]
            )
            k.seq = msg["seq"]
            self.known.append(k)
        if msg.get("verdict"):
            k.verdicts.add(msg["verdict"])
        k.end_step = max(k.end_step, msg.get("end_step") or msg["step"])

    def find(
        self, kind: str, curve: str | None, step: int, end_step: int | None, tol: int
    ) -> Known | None:
        """The known event this candidate is (same kind and curve, ranges within `tol` steps)."""
        end = end_step if end_step is not None else step
        for k in self.known:
            if k.kind == kind and k.curve == curve:
                if step <= k.end_step + tol and end >= k.step - tol:
                    return k
        return None

    def append(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Number, timestamp and durably append one message; returns it as written."""
        msg = json_safe({"seq": self.next_seq, "time": round(time.time(), 3), **msg})
        line = (json.dumps(msg, ensure_ascii=False, default=str, allow_nan=False) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        self.messages.append(msg)
        self._remember(msg)
        return msg

    def has(self, message: str, **match: Any) -> bool:
        return any(
            m.get("message") == message and all(m.get(k) == v for k, v in match.items())
            for m in self.messages
        )
