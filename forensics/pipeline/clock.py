"""Per-stage wall times, with a status line while each stage runs."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class StageClock:
    """Times stages (`timings[name]`, seconds, summed over repeats) and shows each on stderr."""

    def __init__(self, progress: bool) -> None:
        self.timings: dict[str, float] = {}
        self.progress = progress
        self._console: Any = None

    @contextmanager
    def stage(self, name: str, what: str, *, spinner: bool = False) -> Iterator[None]:
        """Time a stage. Stages whose work shows its own progress bar (replay, decode, score,
        embed) get none here: rich cannot nest live displays. The others get a spinner."""
        from forensics.outputs import fault_point

        fault_point(f"stage:{name}")  # tests only: FORENSICS_FAULT_AT (forensics/outputs.py)
        t0 = time.perf_counter()
        if self.progress:
            from rich.markup import escape

            from dataloaders.console import make_console

            self._console = self._console or make_console(stderr=True)
            if spinner and self._console.is_terminal:  # off a terminal a live status leaves
                # blank lines behind
                with self._console.status(f"[bold]{name}[/]: {escape(what)}"):
                    yield
            else:
                yield
            self._console.print(
                f"[dim]{name:<10}[/] {escape(what)} [dim]({time.perf_counter() - t0:.1f} s)[/]"
            )
        else:
            yield
        self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - t0
