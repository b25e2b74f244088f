"""The report stage: the report built from the stages' tables, then every output published."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from dataloaders.run_config import RunConfig
from forensics.cluster.sample import SAMPLE_DOCS, SampleDesign
from forensics.cluster.texts import ScoredTexts
from forensics.cluster.verdict import culprit_docs
from forensics.errors import ForensicsError
from forensics.inputs_guard import check_unchanged
from forensics.pipeline import cache_key, cached_scan, content_digest, module_version
from forensics.pipeline.cache import keep_latest
from forensics.report import ReportSkip, build_report
from forensics.report.control_view import next_causes
from forensics.report.documents import write_documents_table
from forensics.report.incident import Incident, share_past_spike
from forensics.rescore.export import require_megatron
from forensics.rollback import Rollback
from forensics.skip.action import shown_path
from forensics.skip.plan import SkipPlan
from forensics.spike.options import RerunArgs
from forensics.spike.outdir import publish_outputs
from forensics.spike.run_context import SpikeRun
from forensics.spike.stages import Clusters
from forensics.triage.analyze import triage
from forensics.triage.readers import read_log
from forensics.window import stage_starts

KEPT_DOCUMENT_TABLES = 3  # documents.parquet of the latest blames (--culprit back and forth)


def log_evidence(
    config: RunConfig, window: tuple[int, int], notes: list[str]
) -> tuple[pl.DataFrame | None, list[dict[str, Any]]]:
    """The training log's loss (for the report's overlay), or None with a note; and what
    `forensics triage` finds in the log around the window (an alarm before the spike, the
    spike's verdict), as notes and as events for the incident timeline, so the spike report
    and triage tell one story."""
    if config.log is None:
        return None, []
    try:
        frame = read_log(config.log)
    except ForensicsError as err:
        notes.append(f"training log not overlaid: {err}")
        return None, []
    except ImportError:
        notes.append("training log not overlaid: the log reader is not installed")
        return None, []
    last = frame["step"].max() if frame.height else None
    if last is None or window[1] > int(last):
        notes.append(
            f"warning: the spike step {window[1]} is past the training log's last iteration "
            f"({last}): the log shows no spike there; check --step (the verdict describes the "
            "data of that window, not a spike the log saw)"
        )
    events = triage_events(frame, window, notes)
    notes.extend(event_line(event) for event in events)
    return frame.select("step", "loss"), events


def triage_events(
    frame: pl.DataFrame, window: tuple[int, int], notes: list[str], late: int = 100
) -> list[dict[str, Any]]:
    """triage's events from the window's start to `late` iterations past the spike; a failed
    triage is a note and no events."""
    try:
        result = triage(frame)
    except ForensicsError as err:
        notes.append(f"triage of the training log failed: {err}")
        return []
    return [e for e in result.events if window[0] <= int(e["step"]) <= window[1] + late]


def event_line(event: dict[str, Any]) -> str:
    """One triage event as a note: "triage: grad_norm_alarm at 2258: ..."."""
    verdict = f" ({event['verdict']})" if event.get("verdict") else ""
    summary = str(event.get("evidence", {}).get("summary") or "")
    return f"triage: {event['kind']}{verdict} at {event['step']}: {summary}"


def triage_notes(frame: pl.DataFrame, window: tuple[int, int], late: int = 100) -> list[str]:
    """triage's events from the window's start to `late` iterations past the spike, one line
    each ("triage: grad_norm_alarm at 2258: ...")."""
    notes: list[str] = []
    events = triage_events(frame, window, notes, late)
    return notes + [event_line(event) for event in events]


def incident_for_report(
    run: SpikeRun,
    events: list[dict[str, Any]],
    exposure: pl.DataFrame,
    ahead: pl.DataFrame,
    blocked: int,
) -> Incident:
    """The incident timeline's marks: triage's events, the data stages, the checkpoints, and
    (when a block list exists) the culprit's share of each iteration after the spike, from the
    exposure the skip plan measured (skip scope and ahead: to the end of training)."""
    spans = pl.concat([exposure, ahead], how="vertical_relaxed")
    share = share_past_spike(spans, run.step) if blocked else None
    return Incident(
        events=[
            {k: e[k] for k in ("kind", "step", "end_step", "verdict") if k in e} for e in events
        ],
        stage_starts=stage_starts(run.config),
        checkpoints=run.config.available_checkpoints(run.trainer),
        culprit_ahead=share,
        last_iteration=run.replayer.last_iteration,
    )


def documents_for_report(
    run: SpikeRun,
    clusters: Clusters,
    window_docs: pl.DataFrame,
    rows: pl.DataFrame,
    culprits: tuple[str, ...] | None = None,
    figures: pl.DataFrame | None = None,
    texts: ScoredTexts | None = None,
) -> tuple[pl.LazyFrame, Path]:
    """The drill-down's table, every window document (documents.parquet; see
    forensics.report.documents), each marked with the culprit it is blamed with; and the
    stage cache's file that holds it, keyed by what it is built from: the window's documents
    and rows (the run key), the ranked clusters and the blamed documents (so --culprit naming
    the clusters the verdicts blame reads the same file back). `rows`: the window's replay rows
    (forensics.spike.stages.window_rows); `culprits`: the cluster ids named by hand
    (`--culprit`); `figures`: per-document columns joined onto the window's documents by key
    (those a sampled side leaves out), `texts` the texts it leaves out."""
    only = list(culprits) if culprits else None
    blamed = culprit_docs(clusters.ranked, window_docs, only=only)
    key = cache_key(run=run.key, ranked=content_digest(clusters.ranked),
                    blamed=content_digest(blamed),
                    code=[module_version("forensics"), module_version("dataloaders")])  # fmt: skip

    def write(path: Path) -> None:
        write_documents_table(window_docs, clusters.ranked, rows, blamed, path, figures=figures,
                              texts=texts)  # fmt: skip

    path = run.cache / f"documents-{key}.parquet"
    table = cached_scan(path, write, run.hits, "documents")
    path.touch()  # recently used: kept by keep_latest
    keep_latest(run.cache, "documents-*.parquet", KEPT_DOCUMENT_TABLES)
    return table, path


def report_stage(
    run: SpikeRun,
    rows: pl.DataFrame,
    clusters: Clusters,
    window_docs: pl.DataFrame,
    baseline_docs: pl.DataFrame,
    rollback: Rollback,
    skip: SkipPlan,
    exposure: pl.DataFrame,
    ahead: pl.DataFrame,
    evidence: tuple[pl.DataFrame | None, list[dict[str, Any]]] | None = None,
    *,
    culprits: tuple[str, ...] | None = None,
    sample_docs: int = SAMPLE_DOCS,
    rerun: RerunArgs | None = None,
    figures: pl.DataFrame | None = None,
    texts: ScoredTexts | None = None,
) -> tuple[Any, list[Any]]:
    """Build the report and publish it with skip.json and the restart files, as one step.
    Returns the report and its sections (computed once; the terminal lays them out too).

    `rows`: the window's replay rows (forensics.spike.stages.window_rows). `evidence`:
    log_evidence's loss and triage events, when the caller already read the log
    (the rollback stage needs its alarms). `culprits`: the cluster ids of `--culprit`;
    `sample_docs`: the documents scored per group when they were sampled; `rerun`: what the
    suggested rerun with a checkpoint repeats (None: no suggestion); `figures`: the scored
    documents' figures a sampled side leaves out (forensics.spike.passes.scored_figures),
    joined back in documents.parquet; `texts`: the texts it leaves out
    (forensics.cluster.texts), read where shown."""
    if evidence is None:
        evidence = log_evidence(run.config, run.plan.window, run.notes)
    loss, events = evidence
    with run.clock.stage("report", f"to {run.out}", spinner=True):
        report = build_report(
            run.step,
            run.plan.window,
            run.plan.baseline,
            rollback.iteration,
            clusters.ranked,
            window_docs,
            baseline_docs,
            replay=rows,
            assignments=clusters.assignments,
            embedding_note=clusters.embedding_note,
            loss=loss,
            skip=ReportSkip.from_plan(skip),
            rollback_note=rollback.note,
            notes=run.notes,
            model=clusters.model_view,
            design=sample_design(sample_docs, window_docs),
            texts=texts,
        )
        report.documents, report.documents_file = documents_for_report(
            run, clusters, window_docs, rows, culprits, figures, texts
        )
        report.provenance = skip.provenance or None

        report.next_causes = next_causes(events, run.step)
        report.checkpoint_command = checkpoint_command(run, rollback.iteration, rerun)
        blocked = sum(len(v) for v in skip.documents.values())
        report.incident = incident_for_report(run, events, exposure, ahead, blocked)

        check_unchanged(run.config, run.inputs, "spike")
        report.run_config = config_argument(run.config)
        report.token_export = exports_tokens(run.replayer)
        sections = publish_outputs(report, skip, run.cache, run.out)
    return report, sections


def sample_design(sample_docs: int, window_docs: pl.DataFrame) -> SampleDesign | None:
    """How the documents were sampled (forensics.spike.passes), or None: all were scored."""
    return SampleDesign(sample_docs) if "_scored" in window_docs.columns else None


def exports_tokens(replayer: Any) -> bool:
    """Whether `forensics replay --tokens` writes this run's exact token ids (the drill-down's
    command); otherwise the drill-down offers the replay rows with their token ranges."""
    try:
        require_megatron(replayer)
    except ForensicsError:
        return False
    return True


def config_argument(config: RunConfig) -> str | None:
    """The run's config as a command line names it: None for the runbook's ./forensics.yaml
    (the default) or a config built from Megatron arguments, else its path."""
    from pathlib import Path

    source = config.source
    if source is None or Path(source) == (Path.cwd() / "forensics.yaml").resolve():
        return None
    return str(shown_path(Path(source)))


def checkpoint_command(run: SpikeRun, rollback: int | None, rerun: RerunArgs | None) -> str | None:
    """The same spike analysis (`rerun`: the choices it repeats) with the model's view:
    `--checkpoint` the checkpoint the rollback chose (the newest before the window's trouble),
    into its own output folder; paths quoted. None when this analysis already had a checkpoint
    or losses file (or `rerun` is None)."""
    import shlex

    if rerun is None or rerun.rescored:
        return None
    folder = run.config.checkpoint_dir
    saved = (
        None
        if rollback is None or folder is None
        else folder / run.trainer.checkpoint_name(rollback)
    )
    if saved is not None and saved.is_dir():
        ckpt = str(shown_path(saved))
    else:
        ckpt = "<pre-spike checkpoint: Hugging Face, Megatron torch_dist or OLMo-core folder>"
    parts = ["forensics", "spike", "--step", str(run.step), "--window", str(rerun.window)]
    config = config_argument(run.config)
    if config:
        parts += ["--config", config]
    if rerun.baseline:
        parts += ["--baseline", rerun.baseline]
    out = str(shown_path(run.out.parent / f"{run.out.name}-model"))
    return shlex.join([*parts, "--checkpoint", ckpt, "--out", out])
