"""A group's share against its blend, and its density over the window, in words.

The cluster table's `window` column counts distinct documents; the blend speaks in samples.
These lines put the two side by side for a blamed or suspect group ("4.1% of the window's
samples, expected 4.0% (blend of stage 2)") and say when it was drawn ("in 60 of 300 iterations,
up to 22% of a step at iteration 2230, 30 iterations before the spike"). Columns read (all
optional: a table built without a replay or a blend has none of them): `sample_share`,
`expected_share`, `blend_ratio`, `blend_stages` (forensics.cluster.expected), `iterations_with`,
`peak_share`, `peak_iteration`, `density` (forensics.cluster.presence).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from forensics.cluster.baseline_fit import BURST_FACTOR
from forensics.cluster.verdict import MIN_ENRICHMENT
from forensics.report.numbers import pct


def expected_words(row: dict[str, Any]) -> str | None:
    """ "expected 4.0% (blend of stage 2)", or None when the blend does not say."""
    expected = row.get("expected_share")
    if expected is None or not row.get("blend_stages"):
        return None
    return f"expected {pct(float(expected))} (blend of {row['blend_stages']})"


def share_line(row: dict[str, Any]) -> str | None:
    """The group's share of the window's samples next to what the blend expects of it."""
    expected = expected_words(row)
    if row.get("sample_share") is None or expected is None:
        return None
    line = f"{pct(float(row['sample_share']))} of the window's samples, {expected}"
    ratio = row.get("blend_ratio")
    if ratio is not None:
        line += ": " + ratio_words(float(ratio))
    return line


def ratio_words(ratio: float) -> str:
    """What observed / expected means: "sampled at its blend weight" within the band the
    over-representation test does not call (1 / MIN_ENRICHMENT to MIN_ENRICHMENT), else
    "sampled at 2.3x its blend weight"."""
    if 1.0 / MIN_ENRICHMENT < ratio < MIN_ENRICHMENT:
        return f"sampled at its blend weight ({ratio:.1f}x)"
    return f"sampled at {ratio:.1f}x its blend weight"


def table_cell(row: dict[str, Any]) -> str:
    """The table's "samples / expected" cell: "4.1% / 4.0% (stage 2)", or "" when unknown."""
    share = row.get("sample_share")
    if share is None:
        return ""
    expected = row.get("expected_share")
    if expected is None or not row.get("blend_stages"):
        return f"{100 * float(share):.2f}%"
    return f"{100 * float(share):.2f}% / {100 * float(expected):.2f}% ({row['blend_stages']})"


def density_line(
    row: dict[str, Any], step: int, window: tuple[int, int], stage_starts: Sequence[int] = ()
) -> str | None:
    """When the group was drawn: in how many of the window's iterations, its peak share of one
    step and how long before the spike, and whether that makes a burst. A group new in the
    window after a data stage starts in it is dense at the window's end because the stage
    began there: that is the stage start, said as such, not a burst."""
    hits = row.get("iterations_with")
    if not hits or row.get("peak_iteration") is None:
        return None
    length = window[1] - window[0] + 1
    peak = int(row["peak_iteration"])
    before = step - peak
    when = (
        f"{before} iteration{'s' if before != 1 else ''} before the spike"
        if before
        else "at the spike"
    )
    line = (
        f"in {int(hits):,} of {length:,} iterations, up to {pct(float(row['peak_share']))} of a "
        f"step at iteration {peak}, {when}"
    )
    density = float(row.get("density") or 0.0)
    if density >= BURST_FACTOR:
        starts = [s for s in stage_starts if window[0] < s <= window[1]]
        if row.get("new_in_window") and starts:
            line += (
                f"; {density:.1f}x its even share in the window's last quarter, since the data "
                f"stage starting at iteration {starts[-1]} (a stage start, not a burst)"
            )
        else:
            line += f"; a burst: {density:.1f}x its even share in the window's last quarter"
    return line


def blend_lines(
    row: dict[str, Any], step: int, window: tuple[int, int], stage_starts: Sequence[int] = ()
) -> list[str]:
    """The why lines a blamed or suspect group gets: its share against the blend, its density."""
    lines = [share_line(row), density_line(row, step, window, stage_starts)]
    return [line for line in lines if line]
