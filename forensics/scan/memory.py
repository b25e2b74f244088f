"""Peak anonymous memory of this process, sampled: what a scan really holds.

`ru_maxrss` counts the pages of the memory-mapped `.bin/.idx` files a worker touched (page
cache: shared, clean, reclaimable under pressure), so it grows with every document read and says
nothing about whether the scan's own memory is flat. Linux's `RssAnon` (/proc/self/status) is the
process's private memory; a daemon thread samples it every INTERVAL seconds and keeps the peak.
Elsewhere (no /proc) the peak falls back to `ru_maxrss`.
"""

from __future__ import annotations

import re
import resource
import threading
from pathlib import Path

INTERVAL = 0.02
_STATUS = Path("/proc/self/status")
_ANON = re.compile(rb"RssAnon:\s+(\d+) kB")


def anon_mb() -> float | None:
    """Current private (anonymous) resident memory in MB, or None off Linux."""
    try:
        match = _ANON.search(_STATUS.read_bytes())
    except OSError:
        return None
    return int(match.group(1)) / 1024 if match else None


class AnonPeak:
    """`with AnonPeak() as peak: ...; peak.mb` is the largest RssAnon seen inside the block."""

    def __init__(self) -> None:
        self.mb = anon_mb() or 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL):
            now = anon_mb()
            if now is not None and now > self.mb:
                self.mb = now

    def __enter__(self) -> AnonPeak:
        if anon_mb() is None:
            return self
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        now = anon_mb()
        if now is None:
            self.mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        elif now > self.mb:
            self.mb = now
