"""What the incident timeline marks besides the loss: triage's alarms, data-stage switches, the
checkpoints on disk, and the culprit's share of every iteration past the spike.

Plain data, filled by the spike pipeline (forensics.spike.reporting.incident_for_report) and
drawn by forensics.report.timeline; it imports nothing from the report, so the model can hold it
without an import circle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

AHEAD_SCHEMA = {"iteration": pl.Int64, "samples": pl.Int64, "share": pl.Float64}


@dataclass
class Incident:
    """events         triage's events from the window's start to a little past the spike (the
                      ones forensics.spike.reporting.triage_notes words): dicts with kind, step,
                      end_step (alarms), verdict (spikes); [] when no log was configured
    stage_starts   first iteration of each data stage ([1] for a run with one stage)
    checkpoints    iterations of the checkpoints the run lists or has on disk, sorted
    culprit_ahead  one row per iteration after the spike to the end of training: iteration,
                   samples (the iteration's global batch), share (of those samples holding a
                   block-list document, forensics.spike.exposure); None when nothing is blamed
    last_iteration the run's last training iteration, when known
    """

    events: list[dict[str, Any]] = field(default_factory=list)
    stage_starts: list[int] = field(default_factory=list)
    checkpoints: list[int] = field(default_factory=list)
    culprit_ahead: pl.DataFrame | None = None
    last_iteration: int | None = None


def share_past_spike(exposure: pl.DataFrame, step: int) -> pl.DataFrame:
    """Incident.culprit_ahead from Replayer.exposure tables (iteration, samples,
    flagged_samples) covering the iterations after `step`: iterations that drew no sample are
    left out (their share is undefined)."""
    if exposure.height == 0:
        return pl.DataFrame(schema=AHEAD_SCHEMA)
    return (
        exposure.filter((pl.col("iteration") > step) & (pl.col("samples") > 0))
        .unique("iteration", keep="first")
        .sort("iteration")
        .select(
            pl.col("iteration").cast(pl.Int64),
            pl.col("samples").cast(pl.Int64),
            (pl.col("flagged_samples") / pl.col("samples")).cast(pl.Float64).alias("share"),
        )
    )


def remaining_share(ahead: pl.DataFrame) -> float:
    """The culprit's share of all samples in `ahead` (Incident.culprit_ahead)."""
    total = int(ahead["samples"].sum()) if ahead.height else 0
    if not total:
        return 0.0
    return float((ahead["share"] * ahead["samples"]).sum()) / total
