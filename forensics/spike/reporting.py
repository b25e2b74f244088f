"""The report stage: the report built from the stages' tables, then every output published."""

from __future__ import annotations

from typing import Any

import polars as pl

from dataloaders.config import RunConfig
from forensics.errors import ForensicsError
from forensics.rollback import Rollback
from forensics.skip.plan import SkipPlan
from forensics.spike.outdir import publish_outputs
from forensics.spike.restart_files import report_skip
from forensics.spike.run_context import SpikeRun
from forensics.spike.stages import Clusters


def loss_curve(config: RunConfig, notes: list[str]) -> pl.DataFrame | None:
    """The training log's loss (for the report's overlay), or None with a note."""
    if config.log is None:
        return None
    try:
        from forensics.triage.readers import read_log

        frame = read_log(config.log)
        return frame.select("step", "loss")
    except ForensicsError as err:
        notes.append(f"training log not overlaid: {err}")
    except ImportError:
        notes.append("training log not overlaid: the log reader is not installed")
    return None


def report_stage(
    run: SpikeRun,
    replay: pl.DataFrame,
    clusters: Clusters,
    window_docs: pl.DataFrame,
    baseline_docs: pl.DataFrame,
    rollback: Rollback,
    skip: SkipPlan,
) -> Any:
    """Build the report and publish it with skip.json and the restart files, as one step."""
    from forensics.report import build_report

    loss = loss_curve(run.config, run.notes)
    with run.clock.stage("report", f"to {run.out}", spinner=True):
        report = build_report(
            run.options.step,
            run.plan.window,
            run.plan.baseline,
            rollback.iteration,
            clusters.ranked,
            window_docs,
            baseline_docs,
            replay=replay.filter(pl.col("side") == "window"),
            assignments=clusters.assignments,
            embedding_note=clusters.embedding_note,
            loss=loss,
            skip=report_skip(skip),
            rollback_note=rollback.note,
            notes=run.notes,
            model=clusters.model_view,
        )
        publish_outputs(report, skip, run.cache, run.out)
    return report
