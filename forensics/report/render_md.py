"""report.md: the report for a pull request, a ticket or a chat thread.

The first screen is a fenced block (as in ../shared/notes/report-sketch.md), then the cluster
table, examples per culprit/suspect cluster, the plots (PNG files beside report.md) and the
rules. Text from documents is made inert: inside the fence it only has control characters and
fence markers removed; everywhere else it is HTML-escaped and Markdown punctuation is escaped,
so a crawled `<script>` or `[link](...)` stays text.
"""

from __future__ import annotations

from forensics.report.model import SpikeReport, cluster_name, cluster_notes, cluster_rows, format_p
from forensics.report.model_view import markdown_section
from forensics.report.sections import documents_markdown, skip_markdown
from forensics.report.summary import summary_lines
from forensics.report.why_shares import table_cell
from forensics.safe_text import fence_safe, md_code, md_safe


def summary_block(report: SpikeReport) -> str:
    lines = []
    for label, text in summary_lines(report):
        lines.append(f"{label:<10} {fence_safe(text)}" if lines else fence_safe(text))
    return "~~~text\n" + "\n".join(lines) + "\n~~~\n"


def notes_block(report: SpikeReport) -> str:
    """The pipeline's notes as a list under the summary (empty string when there are none)."""
    if not report.notes:
        return ""
    return "\n".join(f"- note: {md_safe(note, 600)}" for note in report.notes) + "\n"


def _table(report: SpikeReport) -> str:
    head = (
        "| id | verdict | cluster | docs | window | baseline | enrichment | p | samples / expected"
        " | flagged | garbage | spam | suspicion | note |\n|" + "---|" * 14 + "\n"
    )
    body = []
    for r in cluster_rows(report):
        note = cluster_notes(r)
        label = r.get("label") or r["verdict"]
        body.append(
            f"| {md_safe(r['id'])} | {label} | {md_safe(cluster_name(r), 80)} | "
            f"{r['docs']:,} | {100 * r['window_share']:.2f}% | {100 * r['baseline_share']:.2f}% | "
            f"{r['enrichment']:.1f} | {format_p(r['p_value'])} | {table_cell(r)} | "
            f"{100 * r['flagged_rate']:.0f}% | "
            f"{100 * r['garbage_rate']:.0f}% | {100 * r['spam_rate']:.0f}% | "
            f"{r['suspicion']:.3f} | {md_safe('; '.join(note), 160)} |"
        )
    more = report.clusters.height - len(body)
    tail = f"\n{more:,} more clean clusters in report.json.\n" if more > 0 else "\n"
    return head + "\n".join(body) + "\n" + tail


def _examples(report: SpikeReport) -> str:
    if report.examples is None or report.examples.height == 0:
        return "No examples.\n"
    verdicts = dict(zip(report.clusters["id"], report.clusters["verdict"], strict=True))
    names = {r["id"]: cluster_name(r) for r in report.clusters.iter_rows(named=True)}
    out = []
    for (cluster,), group in report.examples.group_by("cluster", maintain_order=True):
        if verdicts.get(cluster) == "clean":
            continue
        out.append(f"### {md_safe(cluster)}: {md_safe(names.get(cluster, ''), 120)} "
                   f"({verdicts.get(cluster)})\n")  # fmt: skip
        for ex in group.iter_rows(named=True):
            reasons = md_safe("; ".join(ex["reasons"]) or "not flagged", 200)
            out.append(
                f"- {md_code(ex['dataset'], 60)} doc {ex['doc_id']} ({reasons}): "
                f"{md_safe(ex['excerpt'])}"
            )
        out.append("")
    return "\n".join(out) + "\n" if out else "No culprit or suspect clusters.\n"


def render_markdown(report: SpikeReport, plot_files: dict[str, str] | None = None) -> str:
    """The whole report.md; `plot_files` maps plot name -> file name beside report.md."""
    from forensics.provenance import provenance_line

    parts = [f"# Spike report: iteration {report.step}\n"]
    if report.provenance:
        parts.append(md_safe(provenance_line(report.provenance), 2000) + "\n")
    parts.append(summary_block(report))
    if report.notes:
        parts.append(notes_block(report))
    # The sections in report.html's order (forensics.report.sections.SECTION_ORDER).
    parts.append("## Plots\n")
    titles = {
        "timeline": "Incident timeline",
        "culprit_share": "Culprit share per iteration",
        "embedding": "Embedding clusters in 2-D",
        "scores": "Scores, window vs baseline",
    }
    for name, file in (plot_files or {}).items():
        parts.append(f"![{titles.get(name, name)}]({file})\n")
    if not plot_files:
        parts.append("No plots (no data for them).\n")
    parts += ["## Clusters\n", _table(report)]
    if report.embedding_note:
        parts.append(f"Embedding sample: {md_safe(report.embedding_note.get('text', ''), 600)}.\n")
    parts += ["## Examples\n", _examples(report)]
    parts += [documents_markdown(report), markdown_section(report), skip_markdown(report)]
    parts += [
        "## How the verdicts are made\n",
        f"- Verdict rule: {md_safe(report.rules['verdict_rule'], 2000)}",
        f"- Suspicion: {md_safe(report.rules['suspicion_formula'], 2000)}\n",
    ]
    if report.rules.get("model_rule"):
        parts.append(f"- Model side: {md_safe(report.rules['model_rule'], 2000)}\n")
    return "\n".join(parts)
