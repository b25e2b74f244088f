"""The replayers' progress bar: rich, on stderr, gone when done; a no-op when disabled."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from dataloaders.console import make_console


@contextlib.contextmanager
def progress_bar(enabled: bool, total: int, label: str) -> Iterator[Any]:
    """Yields advance(n=1); a no-op callable when disabled or off a terminal (a live display
    there leaves blank lines in the log)."""
    console = make_console(stderr=True)
    if not (enabled and console.is_terminal):
        yield lambda n=1: None
        return
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n=1: bar.advance(task, n)
