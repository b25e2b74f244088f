"""Per-stage wall times, with a status line while each stage runs."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dataloaders.console import make_console
from forensics.fault_points import fault_point


class StageClock:
    """Times stages (`timings[name]`, seconds, summed over repeats) and shows each on stderr."""

    def __init__(self, progress: bool) -> None:
        self.timings: dict[str, float] = {}
        self.progress = progress
        self._console: Any = None

    @contextmanager
    def stage(self, name: str, what: str, *, spinner: bool = False) -> Iterator[None]:
        """Time a stage. On a terminal it shows while it runs and is gone when done (the screen
        is the summary's): stages whose work shows its own progress bar (replay, decode, score,
        embed) get none here, rich cannot nest live displays; the others get a spinner. Off a
        terminal (a log) each stage is one line when done, with its time."""
        fault_point(f"stage:{name}")  # tests only: FORENSICS_FAULT_AT (forensics/outputs.py)
        t0 = time.perf_counter()
        if self.progress:
            from rich.markup import escape

            self._console = self._console or make_console(stderr=True)
            if not self._console.is_terminal:
                yield
                self._console.print(f"{name:<10} {escape(what)} ({time.perf_counter() - t0:.1f} s)")
            elif spinner:
                with self._console.status(f"[bold]{name}[/]: {escape(what)}"):
                    yield
            else:
                yield
        else:
            yield
        self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - t0
