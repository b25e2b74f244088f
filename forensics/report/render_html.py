"""report.html: one self-contained page (inline CSS, plots as base64 PNG, no scripts, no links
out), so it opens from a laptop's downloads folder on a plane.

Laid out from the sections (forensics.report.sections) in their order. The first screen: the
headline, one box with the action's commands in the order to run them, the stopgap under it,
then the reasons. Commands wrap at spaces (never sideways scrolling) and copy back as the one
line they are: soft wraps insert no newline.

Every piece of text that is not our own literal markup goes through `html.escape` (our own
strings) or `forensics.safe_text.html_safe` (anything from documents, manifests or flags): a
crawled `<script>alert(1)</script>` shows as text. The page carries a Content-Security-Policy
that forbids scripts and remote loads, as a second line of defence.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forensics.pipeline import cache_key, cached_bytes, module_version
from forensics.pipeline.cache import keep_latest
from forensics.provenance import provenance_line
from forensics.report.checkpoint_view import html_section
from forensics.report.contents import cluster_name, cluster_notes, format_p, format_value
from forensics.report.drilldown import CSS as DRILL_CSS
from forensics.report.drilldown import DrillGroup, drilldown_html
from forensics.report.first_screen import Command, FirstScreen
from forensics.report.numbers import flagged_cell
from forensics.report.sections import ClusterTable, ExampleGroup, Section, SkipSection
from forensics.report.summary import counts_text
from forensics.report.why_shares import table_cell
from forensics.safe_text import html_safe

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;
max-width:1200px}
h1{font-size:22px;margin:0 0 8px} h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
div.first{border-left:6px solid #d62728;padding:4px 0 4px 12px;margin:8px 0}
div.first.none{border-left-color:#0072b2}
p.headline{font-size:16px;font-weight:bold;margin:0 0 8px}
div.box{border:1px solid #bbb;background:#fafafa;padding:6px 10px;margin:0 0 8px}
div.box ol{margin:4px 0;padding-left:22px} div.box li{margin:2px 0 6px}
div.note{font-size:12px;color:#555}
code.cmd{display:block;white-space:pre-wrap;overflow-wrap:anywhere;word-break:normal;
font-size:13px;background:#fff;border:1px solid #ddd;padding:2px 6px;user-select:all}
div.stopgap{font-size:13px;margin:0 0 8px;padding:4px 10px;border:1px dashed #bbb}
pre.summary{background:#fafafa;border:1px solid #ddd;padding:8px 12px;margin:0;
white-space:pre-wrap;font-size:13px;line-height:1.45}
pre.summary span.ln{display:block;padding-left:11ch;text-indent:-11ch}
div.stopgap span.ln{display:block}
pre.flags{white-space:pre-wrap;overflow-wrap:anywhere;word-break:normal;font-size:12px;
background:#f7f7f7;border:1px solid #eee;padding:6px;margin:4px 0 10px}
.label{font-weight:bold;color:#d62728}
table{border-collapse:collapse;font-size:12px;width:100%}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f0f0f0} td.num{text-align:right;font-variant-numeric:tabular-nums;
white-space:nowrap}
tr.culprit td{background:#fde8e8} tr.suspect td{background:#fff4e0}
.ex{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;background:#f7f7f7;
padding:6px;border:1px solid #eee;margin:4px 0 10px;white-space:pre-wrap;word-break:break-all}
img{max-width:100%;border:1px solid #eee;margin:6px 0}
.muted{color:#666;font-size:12px}
ul.notes{font-size:13px;color:#444;margin:6px 0 0;padding-left:20px}
"""
KEPT_DRILL_PAGES = 8  # drill-down HTML kept (documents_html): one per blame and code
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _command(c: Command, number: int | None = None) -> str:
    lead = f"{number}. " if number is not None else ""
    return (
        f'<div class="note">{lead}{html_safe(c.note, 600)}</div>'
        f'<code class="cmd">{html_safe(c.text, len(c.text) + 1)}</code>'
    )


def _labelled(label: str, text: str) -> str:
    """A reasons line: the label (data-label: the browser test finds lines by it), the text."""
    safe = html_safe(text, 2000)
    if not label:
        return f'<span class="ln">{" " * 11}{safe}</span>'
    return (
        f'<span class="ln"><span class="label">{_e(label):<10}</span> '
        f'<span data-label="{_e(label.lower())}">{safe}</span></span>'
    )


def first_screen_html(screen: FirstScreen, culprit: bool) -> str:
    """Headline, the commands' box, the stopgap, the reasons."""
    parts = [f'<p class="headline" data-label="headline">{html_safe(screen.headline, 600)}</p>']
    if screen.action or screen.commands:
        items = "".join(f"<li>{_command(c)}</li>" for c in screen.commands)
        parts.append(
            '<div class="box"><span class="label">ACTION</span> '
            f'<span data-label="action">{html_safe(screen.action, 600)}</span>'
            f'<span class="muted"> · run in this order:</span><ol>{items}</ol></div>'
        )
    if screen.stopgap:
        lines = [_labelled(label, text) for label, text in screen.stopgap]
        cmd = _command(screen.stopgap_command) if screen.stopgap_command else ""
        parts.append(f'<div class="stopgap">{"".join(lines)}{cmd}</div>')
    rows = "".join(_labelled(label, text) for label, text in screen.reasons)
    parts.append(f'<pre class="summary">{rows}</pre>')
    cls = "first" if culprit else "first none"
    return f'<div class="{cls}">{"".join(parts)}</div>'


def _stamp(report: Any) -> str:
    """Who wrote the report: run name, version, timestamp, command line."""
    line = provenance_line(report.provenance)
    return f'<p class="muted">{html_safe(line, 2000)}</p>' if line else ""


def notes_html(notes: list[str]) -> str:
    """The pipeline's notes, right under the first screen (they change how the verdict reads)."""
    if not notes:
        return ""
    items = "".join(f"<li>{html_safe(note, 600)}</li>" for note in notes)
    return f'<ul class="notes">{items}</ul>'


def plots_html(plots: list[tuple[str, str]], pngs: dict[str, bytes]) -> str:
    figures = "".join(
        f'<h3>{_e(title)}</h3><img alt="{_e(name)}" src="data:image/png;base64,'
        f'{base64.b64encode(pngs[name]).decode()}">'
        for name, title in plots
        if name in pngs
    )
    return figures or "<p>No plots (no data for them).</p>"


def clusters_html(table: ClusterTable) -> str:
    cols = ["id", "verdict", "cluster", "docs", "window", "baseline", "enrichment", "p",
            "samples / expected", "flagged", "garbage", "spam", "suspicion", "note"]  # fmt: skip
    head = "<tr>" + "".join(f"<th>{c}</th>" for c in cols) + "</tr>"
    rows, clean = [], []
    for r in table.rows:
        note = cluster_notes(r)
        cells = [
            html_safe(r["id"], 20),
            _e(r.get("label") or r["verdict"]),
            html_safe(cluster_name(r), 100),
            f'<td class="num">{r["docs"]:,}',
            f'<td class="num">{100 * r["window_share"]:.2f}%',
            f'<td class="num">{100 * r["baseline_share"]:.2f}%',
            f'<td class="num">{r["enrichment"]:.1f}',
            f'<td class="num">{_e(format_p(r["p_value"]))}',
            f'<td class="num">{_e(table_cell(r))}',
            f'<td class="num">{_e(flagged_cell(r))}',
            f'<td class="num">{100 * r["garbage_rate"]:.0f}%',
            f'<td class="num">{100 * r["spam_rate"]:.0f}%',
            f'<td class="num">{r["suspicion"]:.3f}',
            html_safe(" | ".join(note), 400),
        ]
        tds = "".join(c if c.startswith("<td") else f"<td>{c}" for c in cells)
        (clean if r["verdict"] == "clean" else rows).append(
            f'<tr class="{_e(r["verdict"])}">{tds}</tr>'
        )
    tail = (
        f'<p class="muted">{table.more:,} more clean clusters in report.json.</p>'
        if table.more > 0
        else ""
    )
    folded = (
        f'<details><summary class="muted">{len(clean):,} clean clusters</summary>'
        f"<table>{head}{''.join(clean)}</table></details>"
        if clean
        else ""
    )
    counts = f'<p data-counts="clusters">Clusters: {_e(counts_text(table.counts))}.</p>'
    note = ""
    if table.embedding_note:
        note = f'<p class="muted">Embedding sample: {html_safe(table.embedding_note, 600)}.</p>'
    return f"{counts}<table>{head}{''.join(rows)}</table>{folded}{tail}{note}"


def examples_html(groups: list[ExampleGroup]) -> str:
    out = []
    for g in groups:
        out.append(
            f"<h3>{html_safe(g.row['id'], 20)}: {html_safe(g.name, 120)} "
            f"({_e(g.row['verdict'])})</h3>"
        )
        for ex in g.examples:
            reasons = html_safe("; ".join(ex["reasons"]) or "not flagged", 200)
            out.append(
                f'<div class="muted">{html_safe(ex["dataset"], 80)} doc {int(ex["doc_id"])}: '
                f'{reasons}</div><div class="ex">{html_safe(ex["excerpt"])}</div>'
            )
    return "".join(out) or "<p>No culprit or suspect clusters.</p>"


def skip_html(s: SkipSection) -> str:
    parts = []
    action = s.skip.action
    if action.kind:
        first = action.command or "skip the iterations below"
        parts.append(
            f"<p>First: <b>{_e(action.kind)}</b>: <code>{html_safe(first, 400)}</code></p>"
            f"<p>{html_safe(action.why, 600)}</p>"
        )
    if s.ranges:
        parts.append(f"<p>Skip iterations: {html_safe(s.ranges, 4000)}</p>")
    if s.skip.collateral:
        items = "".join(
            f"<tr><th>{html_safe(k.replace('_', ' '), 80)}</th>"
            f"<td>{html_safe(format_value(v), 300)}</td></tr>"
            for k, v in s.skip.collateral.items()
        )
        parts.append(f"<h3>collateral</h3><table>{items}</table>")
    for t in s.trainers:
        chosen = " (this run's trainer)" if t.chosen else ""
        parts.append(f"<h3>{_e(t.name)}{_e(chosen)}: restart-{_e(t.name)}.flags</h3>")
        if t.line:  # whole, as the file holds it, wrapped at spaces: at the end of the launch line
            parts.append(f'<pre class="flags">{html_safe(t.line, len(t.line) + 1)}</pre>')
            if t.load_first:
                parts.append(
                    f"<p>Load the rollback checkpoint: <code>{html_safe(t.load_first)}</code></p>"
                )
            parts.append(f'<p class="muted">{html_safe(t.consequence, 2000)}</p>')
        else:
            parts.append(f"<p>No exact flag: {html_safe(t.refusal or '', 2000)}</p>")
        parts.append(f'<p class="muted">{html_safe(t.semantics, 2000)}</p>')
    return "".join(parts)


def documents_html(groups: list[DrillGroup], cache: Path | None = None) -> str:
    """The drill-down's HTML; `cache`: a folder where it is kept by the groups it shows (every
    shown document escaped and marked whole: most of the page's cost)."""
    if not groups:
        return ""
    if cache is None:
        return drilldown_html(groups)
    import hashlib

    # the groups' repr: every field, floats exact (content_digest walks 0.1M span tuples)
    shown = hashlib.sha256(repr(groups).encode()).hexdigest()
    key = cache_key(groups=shown, code=module_version("forensics.report"))
    data = cached_bytes(cache / f"drill-{key}.html", lambda: drilldown_html(groups).encode())
    keep_latest(cache, "drill-*.html", KEPT_DRILL_PAGES)
    return data.decode() if data is not None else drilldown_html(groups)


def rules_html(rules: list[tuple[str, str]]) -> str:
    return "".join(f"<p><b>{_e(name)}.</b> {html_safe(text, 2000)}</p>" for name, text in rules)


def render_html(
    report: Any, sections: list[Section], plots: dict[str, bytes], cache: Path | None = None
) -> str:
    """The whole report.html, plots inlined as data: URIs. `cache`: see documents_html."""
    layout: dict[str, Callable[[Any], str]] = {
        "first_screen": lambda screen: first_screen_html(screen, report.culprit is not None),
        "notes": notes_html,
        "plots": lambda names: plots_html(names, plots),
        "clusters": clusters_html,
        "examples": examples_html,
        "documents": lambda groups: documents_html(groups, cache),
        "model": html_section,
        "skip": lambda s: skip_html(s) if s is not None else "",
        "rules": rules_html,
    }
    body = []
    for s in sections:
        part = layout[s.key](s.data)
        if part and s.title:
            body.append(f"<h2>{_e(s.title)}</h2>")
        body.append(part)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>Spike report: iteration {report.step}</title>"
        f"<style>{CSS}{DRILL_CSS}</style></head><body>"
        f"<h1>Spike report: iteration {report.step}</h1>{_stamp(report)}{''.join(body)}"
        "</body></html>\n"
    )
