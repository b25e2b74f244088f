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


def log_evidence(
    config: RunConfig, window: tuple[int, int], notes: list[str]
) -> pl.DataFrame | None:
    """The training log's loss (for the report's overlay), or None with a note; and what
    `forensics triage` finds in the log around the window (an alarm before the spike, the
    spike's verdict), as notes, so the spike report and triage tell one story."""
    if config.log is None:
        return None
    try:
        from forensics.triage.readers import read_log

        frame = read_log(config.log)
    except ForensicsError as err:
        notes.append(f"training log not overlaid: {err}")
        return None
    except ImportError:
        notes.append("training log not overlaid: the log reader is not installed")
        return None
    notes.extend(triage_notes(frame, window))
    return frame.select("step", "loss")


def triage_notes(frame: pl.DataFrame, window: tuple[int, int], late: int = 100) -> list[str]:
    """triage's events from the window's start to `late` iterations past the spike, one line
    each ("triage: grad_norm_alarm at 2258: ...")."""
    from forensics.triage.analyze import triage

    try:
        result = triage(frame)
    except ForensicsError as err:
        return [f"triage of the training log failed: {err}"]
    lines = []
    for event in result.events:
        if not window[0] <= int(event["step"]) <= window[1] + late:
            continue
        verdict = f" ({event['verdict']})" if event.get("verdict") else ""
        summary = str(event.get("evidence", {}).get("summary") or "")
        lines.append(f"triage: {event['kind']}{verdict} at {event['step']}: {summary}")
    return lines


def documents_for_report(
    run: SpikeRun, clusters: Clusters, window_docs: pl.DataFrame, replay: pl.DataFrame
) -> pl.DataFrame:
    """The drill-down's table, every window document (documents.parquet; see
    forensics.report.documents), each marked with the culprit it is blamed with."""
    from forensics.cluster.verdict import culprit_docs
    from forensics.report.documents import documents_table

    only = list(run.options.culprits) if run.options.culprits else None
    blamed = culprit_docs(clusters.ranked, window_docs, only=only)
    window_rows = replay.filter(pl.col("side") == "window")
    return documents_table(window_docs, clusters.ranked, window_rows, blamed)


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

    loss = log_evidence(run.config, run.plan.window, run.notes)
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
        report.documents = documents_for_report(run, clusters, window_docs, replay)
        report.provenance = skip.provenance or None
        publish_outputs(report, skip, run.cache, run.out)
    return report
