"""report.json: the machine-readable report (what a dashboard or the next tool reads).

Keys: step, window [first, last], baseline [first, last], rollback_iteration, rollback_note,
culprit (id of the headline culprit or null), culprit_name ("crawl_batch=crawl-2026-w17"),
headline (one line: the verdict, the culprit, how sure, the action), action, commands (the
action's commands in the order to run them; command_notes: what each does), stopgap_commands,
summary (the first screen as [label, text]), cluster_counts (culprit, suspect,
suspect_inside_culprit, clean, all: the counts every medium prints), plots,
notes (the pipeline's remarks: stage crossings, how the baseline was chosen, ...),
rules (verdict rule, suspicion formula), embedding_sample, skip, culprit_share (per iteration),
and clusters sorted by suspicion, each with id, kind, facet, key, docs, baseline_docs,
window_share, baseline_share, enrichment, p_value, new_in_window, flagged_rate, garbage_rate,
spam_rate, rest_flagged_rate, flag_p_value, baseline_flagged_rate, baseline_flag_p_value,
suspicion, verdict, label, explained_by, top_reasons, the window presence (density,
iterations_with, peak_share, peak_iteration, sample_share) and the blend's expectation
(expected_share, blend_ratio, blend_p_value, blend_stages; null where unknown), where the
documents were sampled (forensics.spike.passes) the flagged rate's basis (scored_docs, and its
95% interval flagged_low, flagged_high; the rate itself where every document was scored), aliases,
dominant_sources (embedding), embedded (embedding), examples [doc_id, dataset, excerpt,
reasons, scores]. Member lists are internal and left out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from dataloaders.storage import fetched
from forensics.pipeline import cache_key, cached_bytes, content_digest, module_version
from forensics.pipeline.cache import keep_latest
from forensics.report.contents import cluster_name
from forensics.report.first_screen import FirstScreen
from forensics.report.sections import Section
from forensics.report.summary import cluster_counts

INTERNAL_COLUMNS = ("members", "flagged_members")
KEPT_CLUSTER_TEXTS = 4  # encoded cluster lists kept (_clusters_text): a few MB each


def _clean(value: Any) -> Any:
    """JSON has no NaN or infinity: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def _clusters(report: Any) -> list[dict[str, Any]]:
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
    return clusters


def _first_screen(screen: FirstScreen) -> dict[str, Any]:
    """headline (one line: verdict, culprit, how sure, action), the action's commands in the
    order to run them, the stopgap's, and the whole screen as [label, text] lines."""
    gap = screen.stopgap_command
    return {
        "headline": screen.headline,
        "action": screen.action,
        "commands": [c.text for c in screen.commands],
        "command_notes": [c.note for c in screen.commands],
        "stopgap_commands": [gap.text] if gap is not None else [],
        "summary": [list(line) for line in screen.lines()],
    }


def report_dict(report: Any, sections: list[Section], clusters: bool = True) -> dict[str, Any]:
    """The report as plain JSON-able data: the header, then each section's keys in order, and
    the clusters last (`clusters=False`: without them)."""
    top = report.culprit
    share = None
    if report.culprit_share is not None:
        share = report.culprit_share.select("iteration", "share").rows()
    layout: dict[str, Callable[[Any], dict[str, Any]]] = {
        "first_screen": _first_screen,
        "notes": lambda notes: {"notes": list(notes)},
        "plots": lambda plots: {"plots": [name for name, _ in plots]},
        "clusters": lambda table: {"cluster_counts": table.counts},
        "examples": lambda _: {},  # each cluster's examples are in `clusters`
        "documents": lambda _: {},  # documents.parquet
        "model": lambda view: {"model": view},  # null without a checkpoint
        "skip": lambda s: {"skip": s.skip.to_dict() if s is not None else None},
        "rules": lambda _: {"rules": report.rules},
    }
    out: dict[str, Any] = {
        "provenance": report.provenance,
        "step": report.step,
        "window": list(report.window),
        "baseline": list(report.baseline),
        "rollback_iteration": report.rollback_iteration,
        "rollback_note": report.rollback_note,
        "culprit": None if top is None else top["id"],
        "culprit_name": None if top is None else cluster_name(top),
        "culprit_first_iteration": report.culprit_first_iteration,
    }
    for s in sections:
        out |= layout[s.key](s.data)
    out |= {"embedding_sample": report.embedding_note, "culprit_share": share}

    if fetched.summary()["requests"]:  # data in object storage: what this command read of it
        out["object_storage"] = fetched.summary()
    if clusters:
        out["clusters"] = _clusters(report)
    return _clean(out)


def _dumps(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def render_json(report: Any, sections: list[Section], cache: Path | None = None) -> str:
    """report.json's text. The clusters (thousands of source facets: most of the file) are
    encoded on their own and spliced in as the last key, the same text one encoding gives;
    `cache`: a folder where that part is kept by the clusters and examples it encodes."""
    head = _dumps(report_dict(report, sections, clusters=False))
    return head[: -len("\n}")] + ",\n" + _clusters_text(report, cache) + "\n}\n"


def _clusters_text(report: Any, cache: Path | None) -> str:
    """`  "clusters": [...]` as it reads one level down in report.json."""

    def encode() -> bytes:
        return _dumps({"clusters": _clean(_clusters(report))})[2:-2].encode()

    if cache is None:
        return encode().decode()

    inputs = content_digest(report.clusters, report.examples)
    key = cache_key(inputs=inputs, code=module_version("forensics.report"))
    data = cached_bytes(cache / f"clusters-{key}.json", encode)
    keep_latest(cache, "clusters-*.json", KEPT_CLUSTER_TEXTS)
    return (data or encode()).decode()


def clusters_from_json(data: dict[str, Any]) -> pl.DataFrame:
    """The clusters of a report.json back as a polars frame (for tests and later tools)."""
    rows = [{k: v for k, v in c.items() if k != "examples"} for c in data["clusters"]]
    return pl.DataFrame(rows, infer_schema_length=None)


def counts_from_json(data: dict[str, Any]) -> dict[str, int]:
    """report.json's clusters counted the way summary.cluster_counts counts them (a reader's
    check that the file's clusters and its `cluster_counts` agree)."""
    return (
        cluster_counts(clusters_from_json(data))
        if data["clusters"]
        else cluster_counts(pl.DataFrame())
    )
