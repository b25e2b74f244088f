"""report.json: the machine-readable report (what a dashboard or the next tool reads).

Keys: step, window [first, last], baseline [first, last], rollback_iteration, rollback_note,
culprit (id of the headline culprit or null), summary (the first screen as [label, text]),
notes (the pipeline's remarks: stage crossings, how the baseline was chosen, ...),
rules (verdict rule, suspicion formula), embedding_sample, skip, culprit_share (per iteration),
and clusters sorted by suspicion, each with id, kind, facet, key, docs, baseline_docs,
window_share, baseline_share, enrichment, p_value, new_in_window, flagged_rate, garbage_rate,
spam_rate, rest_flagged_rate, flag_p_value, suspicion, verdict, label, explained_by, top_reasons,
the window presence (density, iterations_with, peak_share, peak_iteration, sample_share) and
the blend's expectation (expected_share, blend_ratio, blend_p_value, blend_stages; null where
unknown), aliases, dominant_sources (embedding), embedded (embedding), examples [doc_id,
dataset, excerpt, reasons, scores]. Member lists are internal and left out.
"""

from __future__ import annotations

import json
import math
from typing import Any

import polars as pl

from forensics.report.model import SpikeReport
from forensics.report.summary import summary_lines

INTERNAL_COLUMNS = ("members", "flagged_members")


def _clean(value: Any) -> Any:
    """JSON has no NaN or infinity: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def report_dict(report: SpikeReport) -> dict[str, Any]:
    """The report as plain JSON-able data."""
    examples: dict[str, list[dict[str, Any]]] = {}
    if report.examples is not None:
        for ex in report.examples.iter_rows(named=True):
            examples.setdefault(ex["cluster"], []).append(
                {k: v for k, v in ex.items() if k != "cluster"}
            )
    keep = [c for c in report.clusters.columns if c not in INTERNAL_COLUMNS]
    clusters = []
    for row in report.clusters.select(keep).iter_rows(named=True):
        row["examples"] = examples.get(row["id"], [])
        clusters.append(row)
    top = report.culprit
    share = None
    if report.culprit_share is not None:
        share = report.culprit_share.select("iteration", "share").rows()
    return _clean(
        {
            "provenance": report.provenance,
            "step": report.step,
            "window": list(report.window),
            "baseline": list(report.baseline),
            "rollback_iteration": report.rollback_iteration,
            "rollback_note": report.rollback_note,
            "culprit": None if top is None else top["id"],
            "culprit_first_iteration": report.culprit_first_iteration,
            "summary": [list(line) for line in summary_lines(report)],
            "notes": list(report.notes),
            "rules": report.rules,
            "embedding_sample": report.embedding_note,
            "skip": report.skip,
            "culprit_share": share,
            "clusters": clusters,
            "model": report.model,  # what the model choked on; null without a checkpoint
        }
    )


def render_json(report: SpikeReport) -> str:
    return json.dumps(report_dict(report), indent=2, ensure_ascii=False, default=str) + "\n"


def clusters_from_json(data: dict[str, Any]) -> pl.DataFrame:
    """The clusters of a report.json back as a polars frame (for tests and later tools)."""
    rows = [{k: v for k, v in c.items() if k != "examples"} for c in data["clusters"]]
    return pl.DataFrame(rows, infer_schema_length=None)
