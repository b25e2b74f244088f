"""Which iterations the spike is judged on (the window) and against (the baseline)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dataloaders.families import family_of
from forensics.errors import ForensicsError
from forensics.replay import check_window

BASELINE_WINDOWS_BACK = 10  # default baseline: the same length, ending 10 windows earlier


@dataclass(frozen=True)
class SpikeWindows:
    """The window (ending at the spike), the baseline, and how the baseline was chosen."""

    window: tuple[int, int]
    baseline: tuple[int, int]
    baseline_how: str  # a sentence for the report: "ending 3000 iterations before the window"
    crossings: list[int]  # data stage starts inside the window (a mixture switch)


def stage_starts(config: Any) -> list[int]:
    """First iteration of each data stage, as the run's loader family counts them ([1] for a
    family without stages)."""
    return family_of(config).stage_starts(config.data)


def parse_range(text: str, what: str) -> tuple[int, int]:
    """ "FIRST-LAST" -> (first, last), 1-indexed inclusive."""
    parts = text.split("-")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise ForensicsError(f"{what} {text!r}: expected FIRST-LAST, e.g. 1000-1299")
    first, last = int(parts[0]), int(parts[1])
    if not 1 <= first <= last:
        raise ForensicsError(f"{what} {text!r}: need 1 <= FIRST <= LAST")
    return first, last


def choose_baseline(
    window: tuple[int, int], starts: list[int], baseline: str | None, offset: int | None
) -> tuple[tuple[int, int], str]:
    """The baseline window and a sentence saying how it was chosen.

    Default: as many iterations as the window, ending BASELINE_WINDOWS_BACK windows before it,
    clamped at iteration 1 (and never overlapping the window). "stage": the first iterations of
    the data stage the spike is in. "FIRST-LAST": as given.
    """
    first, last = window
    length = last - first + 1
    if baseline is not None and baseline != "stage":
        b = parse_range(baseline, "--baseline")
        if b[1] >= first and b[0] <= last:
            raise ForensicsError(f"--baseline {baseline} overlaps the window {first}-{last}")
        return b, "as given (--baseline)"
    if first <= 1:
        raise ForensicsError(
            f"the window {first}-{last} starts at iteration 1: there is nothing before it to "
            "compare with; pass --baseline FIRST-LAST after the window"
        )
    if baseline == "stage":
        start = max(s for s in starts if s <= last)
        end = min(start + length - 1, first - 1)
        if end < start:
            raise ForensicsError(
                f"--baseline stage: the data stage starts at {start}, inside the window "
                f"{first}-{last}; there is no baseline in it before the window"
            )
        return (start, end), f"the start of the spike's data stage (iteration {start})"
    back = offset if offset is not None else BASELINE_WINDOWS_BACK * length
    if back < 0:
        raise ForensicsError(f"--baseline-offset {back}: must be >= 0")
    end = first - 1 - back
    if end < 1:
        end = min(length, first - 1)
        return (1, end), f"clamped at iteration 1 (the run is too short for {back} back)"
    return (max(1, end - length + 1), end), f"ending {back} iterations before the window"


def crossings(window: tuple[int, int], starts: list[int]) -> list[int]:
    """Data stage starts inside the window (after its first iteration)."""
    return [s for s in starts if window[0] < s <= window[1]]


def choose_windows(
    replayer: Any, config: Any, step: int, length: int, baseline: str | None, offset: int | None
) -> SpikeWindows:
    """The window of `length` iterations ending at `step` (checked against the run), and its
    baseline."""
    window = check_window(replayer, step, length)
    starts = stage_starts(config)
    base, how = choose_baseline(window, starts, baseline, offset)
    return SpikeWindows(window, base, how, crossings(window, starts))
