"""The fault tests' hook: a process that interrupts itself at a named point (stage boundaries,
the steps of a publish), so the tests kill a run deterministically instead of by timing."""

from __future__ import annotations

import os
import signal


def fault_point(name: str) -> None:
    """A test hook, free when unused: with FORENSICS_FAULT_AT=NAME[:SIGNAL] (SIGTERM when no
    signal is named; SIGINT, SIGKILL, ...) this process sends itself SIGNAL at the point called
    NAME, so the fault tests can interrupt a run at every stage boundary deterministically
    instead of with timed kills. Points: `stage:<name>` as each spike stage starts; while an
    output set is published, `publish-start` (journal written, nothing moved), `publish` (the
    first file moved into place) and `publish-end` (every file moved, journal not yet removed)."""
    spec = os.environ.get("FORENSICS_FAULT_AT")
    if not spec:
        return
    where, _, sig = spec.rpartition(":")
    if not sig.startswith("SIG"):
        where, sig = spec, "SIGTERM"
    if where == name:
        os.kill(os.getpid(), getattr(signal, sig))
