"""The spike's window: its default length, its bounds in the run, and the iterations it is
judged against (the baseline). Triage, the watcher and spike take the window from here, so
they say the same thing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dataloaders.base import Replayer, check_iterations
from dataloaders.families import family_of
from forensics.errors import ForensicsError

BASELINE_WINDOWS_BACK = 10  # default baseline: the same length, ending 10 windows earlier


# Iterations `forensics spike` replays before the spike by default: three rollback distances, so
# the window holds every batch trained since the rollback point and the data that came in
# before it (a crawl batch can enter the mixture well before the loss shows it).
SPIKE_WINDOW = 300


def spike_window(step: int, rollback: int) -> tuple[int, str]:
    """The `--window` for a spike at `step` with a restart from `rollback`, and why: triage and
    the watcher suggest it and spike defaults to SPIKE_WINDOW, so they say the same thing.

    Early in a run the window leaves at least half of the iterations before the spike for the
    baseline (spike compares the window with iterations before it)."""
    back = step - rollback
    room = max(1, step // 2)  # iterations the window may take and still leave a baseline
    if back > SPIKE_WINDOW:
        return back, f"--window {back}: back to the rollback checkpoint {rollback}"
    if room < SPIKE_WINDOW:
        window = max(min(back, step - 1), room)
        return window, (
            f"--window {window}: spike's default {SPIKE_WINDOW} would reach before iteration 1; "
            "the iterations before the window are the baseline"
        )
    return SPIKE_WINDOW, (
        f"--window {SPIKE_WINDOW} (spike's default): the {back} iterations since the rollback "
        f"checkpoint {rollback} and the data that came in before them"
    )


def window_bounds(step: int, window: int) -> tuple[int, int]:
    """Window W ending at step S: iterations S-W+1 .. S."""
    if window < 1:
        raise ForensicsError(f"--window must be at least 1, got {window}")
    return step - window + 1, step


def check_window(replayer: Replayer, step: int, window: int) -> tuple[int, int]:
    """(first, last) iterations of the window; a ForensicsError when it leaves the run."""
    first, last = window_bounds(step, window)
    check_iterations(first, last, replayer.last_iteration, f"--window {window} at --step {step}: ")
    return first, last


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
