"""The report, built once, then laid out: a list of sections whose content is computed here,
before any rendering, which report.json, report.md, report.html and the terminal iterate in the
same order. A renderer only lays a section out and escapes its text; it never calls back into
the clustering or the skip plan.

    first screen (headline, commands, stopgap, reasons), notes, Plots, Clusters, Examples,
    Documents by cluster, What the model choked on, Skip and restart, How the verdicts are made
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from forensics.report.contents import SpikeReport, cluster_name, cluster_rows
from forensics.report.drilldown import drill_groups
from forensics.report.first_screen import FirstScreen, first_screen
from forensics.report.skip_view import ReportSkip
from forensics.report.summary import cluster_counts
from forensics.skip.flags import pin_beside

FIRST_SCREEN, NOTES = "first_screen", "notes"
PLOTS, CLUSTERS, EXAMPLES, DOCUMENTS = "plots", "clusters", "examples", "documents"
MODEL, SKIP, RULES = "model", "skip", "rules"
TITLES = {
    FIRST_SCREEN: "",
    NOTES: "",
    PLOTS: "Plots",
    CLUSTERS: "Clusters",
    EXAMPLES: "Examples",
    DOCUMENTS: "Documents by cluster",
    MODEL: "What the model choked on",
    SKIP: "Skip and restart",
    RULES: "How the verdicts are made",
}
SECTION_ORDER = tuple(t for t in TITLES.values() if t)  # the h2 headings, in order
# Each plot's short name (its image's alt text) and title: what its axes show (the same in
# report.md and report.html).
PLOT_NAMES = {
    "timeline": "Incident timeline",
    "culprit_share": "Culprit share per iteration",
    "embedding": "Embedding clusters in 2-D",
    "scores": "Scores, window vs baseline",
}
PLOT_TITLES = {
    "timeline": "Incident timeline: loss and culprit share per iteration, with alarms, stages, "
    "checkpoints, rollback and skips",
    "culprit_share": "Culprit share of each iteration's samples, over the loss",
    "embedding": "Sampled documents by embedding (first two principal components)",
    "scores": "Garbage and spam scores: share of documents per score, window vs baseline",
}


@dataclass(frozen=True)
class Section:
    """One part of the report: `key` (which layout a renderer uses), `title` (its heading;
    "" for the first screen and the notes), `data` (its content, computed)."""

    key: str
    title: str
    data: Any


@dataclass(frozen=True)
class ClusterTable:
    """rows: the table's clusters (model.cluster_rows); counts: summary.cluster_counts; more:
    clusters left out of the table; embedding_note: how the embedding sample was drawn."""

    rows: list[dict[str, Any]]
    counts: dict[str, int]
    more: int
    embedding_note: str = ""


@dataclass(frozen=True)
class ExampleGroup:
    """A culprit or suspect cluster's example documents (model.pick_examples rows)."""

    row: dict[str, Any]
    name: str
    examples: list[dict[str, Any]]


@dataclass(frozen=True)
class TrainerBlock:
    """One trainer's restart file in "Skip and restart": its line (None when refused)."""

    name: str
    chosen: bool
    line: str | None
    load_first: str | None  # the rollback pin, said beside the line (None: it is in the line)
    semantics: str
    consequence: str
    refusal: str | None


@dataclass(frozen=True)
class SkipSection:
    skip: ReportSkip
    ranges: str
    trainers: list[TrainerBlock] = field(default_factory=list)


def _examples(report: SpikeReport) -> list[ExampleGroup]:
    """Examples per culprit or suspect cluster, in the examples table's order."""
    if report.examples is None or report.examples.height == 0:
        return []
    shown = report.examples["cluster"].unique().to_list()  # rows of thousands: only these
    info = {
        r["id"]: r for r in report.clusters.filter(pl.col("id").is_in(shown)).iter_rows(named=True)
    }
    out = []
    for (cluster,), group in report.examples.group_by("cluster", maintain_order=True):
        row = info.get(cluster)
        if row is None or row["verdict"] == "clean":
            continue
        out.append(ExampleGroup(row, cluster_name(row), list(group.iter_rows(named=True))))
    return out


def _skip(skip: ReportSkip | None) -> SkipSection | None:
    if skip is None:
        return None
    blocks = []
    for name, flag in skip.flags.items() if skip.iterations else ():
        blocks.append(
            TrainerBlock(
                name=name,
                chosen=name == skip.trainer,
                line=skip.line(name),
                load_first=pin_beside(flag),
                semantics=flag.semantics,
                consequence=flag.consequence,
                refusal=flag.refusal,
            )
        )
    ranges = ", ".join(f"{a}-{b}" for a, b in skip.iterations)
    return SkipSection(skip, ranges, blocks)


def _rules(report: SpikeReport) -> list[tuple[str, str]]:
    rules = [
        ("Verdict rule", report.rules["verdict_rule"]),
        ("Suspicion", report.rules["suspicion_formula"]),
    ]
    if report.rules.get("model_rule"):
        rules.append(("Model side", report.rules["model_rule"]))
    return rules


def report_sections(
    report: SpikeReport, plots: list[str] | None = None, cache: Path | None = None
) -> list[Section]:
    """Every section of the report, in order, with its content computed. `plots`: the names of
    the plots drawn (forensics.report.plots.render_plots), in order. `cache`: where the
    drill-down keeps what it marked in each document (drilldown.cached_spans)."""
    rows = cluster_rows(report)
    note = (report.embedding_note or {}).get("text", "")
    table = ClusterTable(rows, cluster_counts(report.clusters), report.clusters.height - len(rows),
                         str(note))  # fmt: skip
    screen: FirstScreen = first_screen(report)
    data = {
        FIRST_SCREEN: screen,
        NOTES: list(report.notes),
        PLOTS: [(name, PLOT_TITLES.get(name, name)) for name in plots or []],
        CLUSTERS: table,
        EXAMPLES: _examples(report),
        DOCUMENTS: drill_groups(report, cache),
        MODEL: report.model,
        SKIP: _skip(report.skip),
        RULES: _rules(report),
    }
    return [Section(key, TITLES[key], data[key]) for key in TITLES]


def section(sections: list[Section], key: str) -> Any:
    """The data of the section `key`."""
    return next(s.data for s in sections if s.key == key)
