"""report.md: the report for a pull request, a ticket or a chat thread.

Laid out from the sections (forensics.report.sections) in their order: the first screen (the
headline in bold, the action's commands in one fence in the order to run them, the stopgap
under it, the reasons as a list that wraps), the notes, the plots (PNG files beside report.md),
the cluster table, examples, documents, the model's view, skip and restart, the rules.

Text from documents is made inert: inside a fence it only has control characters and fence
markers removed; everywhere else it is HTML-escaped and Markdown punctuation is escaped, so a
crawled `<script>` or `[link](...)` stays text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from forensics.provenance import provenance_line
from forensics.report.checkpoint_view import markdown_section
from forensics.report.contents import cluster_name, cluster_notes, format_p, format_value
from forensics.report.drilldown import DrillGroup, iterations_text
from forensics.report.first_screen import FirstScreen
from forensics.report.numbers import flagged_cell
from forensics.report.sections import (
    PLOT_NAMES,
    ClusterTable,
    ExampleGroup,
    Section,
    SkipSection,
)
from forensics.report.summary import counts_text
from forensics.report.why_shares import table_cell
from forensics.safe_text import fence_safe, md_code, md_safe

DOCS_IN_MD = 5  # documents per cluster listed in report.md (all of them in report.html)


def _fence(lines: list[str]) -> str:
    return "~~~text\n" + "\n".join(lines) + "\n~~~\n"


def first_screen_md(screen: FirstScreen) -> str:
    """Headline, the commands' fence, the stopgap, the reasons."""
    out = [f"**{md_safe(screen.headline, 600)}**\n"]
    if screen.action or screen.commands:
        box = [f"# ACTION {fence_safe(screen.action)}; run in this order:"]
        for i, c in enumerate(screen.commands, 1):
            box += [f"# {i}. {fence_safe(c.note)}", fence_safe(c.text, len(c.text) + 1)]
        out.append(_fence(box))
    for label, text in screen.stopgap:
        lead = f"**{label}**: " if label else ""
        out.append(f"{lead}{md_safe(text, 2000)}\n")
    if screen.stopgap_command is not None:
        c = screen.stopgap_command
        out.append(_fence([f"# {fence_safe(c.note)}", fence_safe(c.text, len(c.text) + 1)]))
    reasons = []
    for label, text in screen.reasons:
        if label:
            reasons.append(f"- **{md_safe(label)}** {md_safe(text, 2000)}")
        else:
            reasons.append(f"  - {md_safe(text, 2000)}")
    return "\n".join(out) + "\n" + "\n".join(reasons) + "\n"


def notes_md(notes: list[str]) -> str:
    """The pipeline's notes as a list under the first screen (nothing when there are none)."""
    return "\n".join(f"- note: {md_safe(note, 600)}" for note in notes) + "\n" if notes else ""


def plots_md(plots: list[tuple[str, str]], files: dict[str, str]) -> str:
    shown = [
        f"### {md_safe(title)}\n\n![{PLOT_NAMES.get(name, name)}]({files[name]})\n"
        for name, title in plots
        if name in files
    ]
    return "\n".join(shown) if shown else "No plots (no data for them).\n"


def clusters_md(table: ClusterTable) -> str:
    head = (
        "| id | verdict | cluster | docs | window | baseline | enrichment | p | samples / expected"
        " | flagged | garbage | spam | suspicion | note |\n|" + "---|" * 14 + "\n"
    )
    body = []
    for r in table.rows:
        note = cluster_notes(r)
        label = r.get("label") or r["verdict"]
        body.append(
            f"| {md_safe(r['id'])} | {label} | {md_safe(cluster_name(r), 80)} | "
            f"{r['docs']:,} | {100 * r['window_share']:.2f}% | {100 * r['baseline_share']:.2f}% | "
            f"{r['enrichment']:.1f} | {format_p(r['p_value'])} | {table_cell(r)} | "
            f"{flagged_cell(r)} | "
            f"{100 * r['garbage_rate']:.0f}% | {100 * r['spam_rate']:.0f}% | "
            f"{r['suspicion']:.3f} | {md_safe('; '.join(note), 160)} |"
        )
    tail = f"\n{table.more:,} more clean clusters in report.json.\n" if table.more > 0 else "\n"
    out = f"Clusters: {counts_text(table.counts)}.\n\n" + head + "\n".join(body) + "\n" + tail
    if table.embedding_note:
        out += f"\nEmbedding sample: {md_safe(table.embedding_note, 600)}.\n"
    return out


def examples_md(groups: list[ExampleGroup]) -> str:
    out = []
    for g in groups:
        out.append(f"### {md_safe(g.row['id'])}: {md_safe(g.name, 120)} ({g.row['verdict']})\n")
        for ex in g.examples:
            reasons = md_safe("; ".join(ex["reasons"]) or "not flagged", 200)
            out.append(
                f"- {md_code(ex['dataset'], 60)} doc {ex['doc_id']} ({reasons}): "
                f"{md_safe(ex['excerpt'])}"
            )
        out.append("")
    return "\n".join(out) + "\n" if out else "No culprit or suspect clusters.\n"


def documents_md(groups: list[DrillGroup]) -> str:
    """Per culprit/suspect cluster: its documents' count, flagged share and the first few with
    their provenance, iterations, snippet and the tokens command."""
    out = []
    for g in groups:
        out.append(
            f"- {md_safe(g.id)}: {md_safe(g.name, 120)} ({md_safe(g.label)}): {g.total:,} window "
            f"documents, {100 * g.flagged_rate:.0f}% flagged"
        )
        for d in g.docs[:DOCS_IN_MD]:
            facets = "".join(f", {md_safe(k)} {md_code(v, 200)}" for k, v in d.facets.items())
            a, b = d.snippet
            out.append(
                f"  - {md_code(d.dataset, 60)} doc {d.doc_id}{facets}; "
                f"{iterations_text(d.iterations)}: {md_safe(d.text[a:b], 400)}"
            )
            if d.tokens_command:
                out.append(f"    exact tokens: {md_code(d.tokens_command, 600)}")
    out.append("\nWhole documents, corrupted and template spans marked: report.html; every "
               "window document: documents.parquet.\n")  # fmt: skip
    return "\n".join(out)


def skip_md(s: SkipSection) -> str:
    """Skip and restart: the action, the ranges, and every trainer's whole flag in a fence."""
    out = []
    action = s.skip.action
    if action.kind:
        first = action.command or "skip the iterations below"
        out.append(f"First: **{md_safe(action.kind)}**: {md_code(first, 400)}\n")
        out.append(f"{md_safe(action.why, 600)}\n")
    if s.ranges:
        out.append(f"Skip iterations: {md_safe(s.ranges, 4000)}\n")
    if s.skip.collateral:
        out += [f"- {md_safe(k.replace('_', ' '))}: {md_safe(format_value(v))}"
                for k, v in s.skip.collateral.items()]  # fmt: skip
        out.append("")
    for t in s.trainers:
        chosen = " (this run's trainer)" if t.chosen else ""
        out.append(f"### {md_safe(t.name)}{chosen}: restart-{md_safe(t.name)}.flags\n")
        if t.line:  # whole, as restart-<trainer>.flags holds it; at the end of the launch line
            out.append(_fence([fence_safe(t.line, len(t.line) + 1)]))
            if t.load_first:
                out.append(f"Load the rollback checkpoint: {md_code(t.load_first)}\n")
        else:
            out.append(f"No exact flag: {md_safe(t.refusal or '', 2000)}\n")
    return "\n".join(out) + "\n"


def rules_md(rules: list[tuple[str, str]]) -> str:
    return "\n".join(f"- {name}: {md_safe(text, 2000)}" for name, text in rules) + "\n"


def render_markdown(
    report: Any, sections: list[Section], plot_files: dict[str, str] | None = None
) -> str:
    """The whole report.md; `plot_files` maps plot name -> file name beside report.md."""
    layout: dict[str, Callable[[Any], str]] = {
        "first_screen": first_screen_md,
        "notes": notes_md,
        "plots": lambda plots: plots_md(plots, plot_files or {}),
        "clusters": clusters_md,
        "examples": examples_md,
        "documents": lambda groups: documents_md(groups) if groups else "",
        "model": markdown_section,
        "skip": lambda s: skip_md(s) if s is not None else "",
        "rules": rules_md,
    }
    parts = [f"# Spike report: iteration {report.step}\n"]
    if report.provenance:
        parts.append(md_safe(provenance_line(report.provenance), 2000) + "\n")
    for s in sections:
        body = layout[s.key](s.data)
        if body and s.title:
            parts.append(f"## {s.title}\n")
        if body:
            parts.append(body)
    return "\n".join(parts)
