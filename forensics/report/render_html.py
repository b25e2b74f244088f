"""report.html: one self-contained page (inline CSS, plots as base64 PNG, no scripts, no links
out), so it opens from a laptop's downloads folder on a plane.

Every piece of text that is not our own literal markup goes through `html.escape` (our own
strings) or `forensics.safe_text.html_safe` (anything from documents, manifests or flags): a
crawled `<script>alert(1)</script>` shows as text. The page carries a Content-Security-Policy
that forbids scripts and remote loads, as a second line of defence.
"""

from __future__ import annotations

import base64
import html

from forensics.report.model import (
    SpikeReport,
    cluster_name,
    cluster_notes,
    cluster_rows,
    format_p,
    format_value,
)
from forensics.report.summary import summary_lines
from forensics.report.why_shares import table_cell
from forensics.safe_text import html_safe
from forensics.skip.flags import restart_line

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;
max-width:1200px}
h1{font-size:22px;margin:0 0 12px} h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
pre.summary{background:#fafafa;border:1px solid #ddd;border-left:6px solid #d62728;padding:12px;
white-space:pre-wrap;font-size:13px;line-height:1.45}
pre.summary.none{border-left-color:#1f77b4}
pre.summary span.ln{display:block;padding-left:11ch;text-indent:-11ch}
code.paste{display:inline-block;max-width:calc(100% - 12ch);overflow-x:auto;white-space:pre;
vertical-align:top;background:#fff;border:1px solid #ddd;padding:1px 4px;user-select:all;
text-indent:0}
pre.flags{white-space:pre;overflow-x:auto;font-size:12px;background:#f7f7f7;border:1px solid #eee;
padding:6px;margin:4px 0 10px}
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
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
PLOT_TITLES = {
    "timeline": "Incident timeline: loss, alarms, stages, checkpoints, rollback, skip, culprit",
    "culprit_share": "Culprit share per iteration (over the loss when a log was given)",
    "embedding": "Embedding clusters in 2-D",
    "scores": "Score histograms, window vs baseline",
}


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _summary(report: SpikeReport) -> str:
    """The first screen: one <pre> of <span class="ln"> lines (a wrapped line hangs under its
    text, not under the labels), a <span data-label> per labelled line (the screenshot test finds
    CULPRIT and ACTION by it) and the chosen trainer's paste line whole in one
    <code class="paste">: one line that scrolls sideways, never wrapped inside a number."""
    lines: list[str] = []
    paste = _paste(report)
    for label, text in summary_lines(report):
        if paste and label == "PASTE":
            lines += paste
            continue
        if paste and text.startswith("(the file beside this report holds the whole line"):
            continue  # the HTML shows the whole line on the first screen
        safe = html_safe(text, 2000)
        if label:
            lines.append(
                f'<span class="label">{_e(label):<10}</span> '
                f'<span data-label="{_e(label.lower())}">{safe}</span>'
            )
        else:
            lines.append(" " * 11 + safe if lines else safe)
    cls = "summary" if report.culprit is not None else "summary none"
    rows = "".join(f'<span class="ln">{line}</span>' for line in lines)
    return f'<pre class="{cls}">{rows}</pre>'


def _paste(report: SpikeReport) -> list[str]:
    """The PASTE line: the chosen trainer's restart-<trainer>.flags line, whole (report.md and
    the terminal point at the file when it is long; a page can scroll it)."""
    skip = report.skip or {}
    trainer = skip.get("trainer")
    line = restart_line((skip.get("flags") or {}).get(trainer) or {})
    if not skip.get("iterations") or not line:
        return []
    return [
        f'<span class="label">{"PASTE":<10}</span> '
        f'<span data-label="paste">{_e(trainer)} (restart-{_e(trainer)}.flags):</span>',
        f'{" " * 11}<code class="paste">{html_safe(line, len(line) + 1)}</code>',
    ]


def _stamp(report: SpikeReport) -> str:
    """Who wrote the report: run name, version, timestamp, command line."""
    from forensics.provenance import provenance_line

    line = provenance_line(report.provenance)
    return f'<p class="muted">{html_safe(line, 2000)}</p>' if line else ""


def _notes(report: SpikeReport) -> str:
    """The pipeline's notes, right under the summary (they change how the verdict reads)."""
    if not report.notes:
        return ""
    items = "".join(f"<li>{html_safe(note, 600)}</li>" for note in report.notes)
    return f'<ul class="notes">{items}</ul>'


def _table(report: SpikeReport) -> str:
    cols = ["id", "verdict", "cluster", "docs", "window", "baseline", "enrichment", "p",
            "samples / expected", "flagged", "garbage", "spam", "suspicion", "note"]  # fmt: skip
    head = "<tr>" + "".join(f"<th>{c}</th>" for c in cols) + "</tr>"
    rows, clean = [], []
    for r in cluster_rows(report):
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
            f'<td class="num">{100 * r["flagged_rate"]:.0f}%',
            f'<td class="num">{100 * r["garbage_rate"]:.0f}%',
            f'<td class="num">{100 * r["spam_rate"]:.0f}%',
            f'<td class="num">{r["suspicion"]:.3f}',
            html_safe(" | ".join(note), 400),
        ]
        tds = "".join(c if c.startswith("<td") else f"<td>{c}" for c in cells)
        (clean if r["verdict"] == "clean" else rows).append(
            f'<tr class="{_e(r["verdict"])}">{tds}</tr>'
        )
    more = report.clusters.height - len(rows) - len(clean)
    tail = f'<p class="muted">{more:,} more clean clusters in report.json.</p>' if more > 0 else ""
    folded = (
        f'<details><summary class="muted">{len(clean):,} clean clusters</summary>'
        f"<table>{head}{''.join(clean)}</table></details>"
        if clean
        else ""
    )
    return f"<table>{head}{''.join(rows)}</table>{folded}{tail}"


def _examples(report: SpikeReport) -> str:
    if report.examples is None or report.examples.height == 0:
        return "<p>No examples.</p>"
    info = {r["id"]: r for r in report.clusters.iter_rows(named=True)}
    out = []
    for (cluster,), group in report.examples.group_by("cluster", maintain_order=True):
        row = info.get(cluster)
        if row is None or row["verdict"] == "clean":
            continue
        out.append(
            f"<h3>{html_safe(cluster, 20)}: {html_safe(cluster_name(row), 120)} "
            f"({_e(row['verdict'])})</h3>"
        )
        for ex in group.iter_rows(named=True):
            reasons = html_safe("; ".join(ex["reasons"]) or "not flagged", 200)
            out.append(
                f'<div class="muted">{html_safe(ex["dataset"], 80)} doc {int(ex["doc_id"])}: '
                f'{reasons}</div><div class="ex">{html_safe(ex["excerpt"])}</div>'
            )
    return "".join(out) or "<p>No culprit or suspect clusters.</p>"


def _skip(report: SpikeReport) -> str:
    skip = report.skip
    if not skip:
        return ""
    parts = ["<h2>Skip and restart</h2>"]
    action = skip.get("action") or {}
    if action.get("kind"):
        first = action.get("command") or "skip the iterations below"
        parts.append(
            f"<p>First: <b>{_e(action['kind'])}</b>: <code>{html_safe(first, 400)}</code></p>"
            f"<p>{html_safe(action.get('why', ''), 600)}</p>"
        )
    if skip.get("iterations"):
        ranges = ", ".join(f"{a}-{b}" for a, b in skip["iterations"])
        parts.append(f"<p>Skip iterations: {html_safe(ranges, 4000)}</p>")
    for key in ("collateral", "ahead"):
        if isinstance(skip.get(key), dict) and skip[key]:
            items = "".join(
                f"<tr><th>{html_safe(k.replace('_', ' '), 80)}</th>"
                f"<td>{html_safe(format_value(v), 300)}</td></tr>"
                for k, v in skip[key].items()
            )
            parts.append(f"<h3>{_e(key)}</h3><table>{items}</table>")
    if skip.get("documents") is not None:
        parts.append(f"<p>Block list: {int(skip['documents']):,} documents (skip.json).</p>")
    flags = skip.get("flags") or {}
    for name, flag in flags.items() if skip.get("iterations") else ():
        chosen = " (this run's trainer)" if name == skip.get("trainer") else ""
        parts.append(f"<h3>{_e(name)}{_e(chosen)}: restart-{_e(name)}.flags</h3>")
        line = restart_line(flag)
        if line:  # whole and on one line, as the file holds it (it scrolls sideways)
            parts.append(f'<pre class="flags">{html_safe(line, len(line) + 1)}</pre>')
            pin = flag.get("pin") or ""
            if pin and not pin.startswith("--"):
                parts.append(f"<p>Load the rollback checkpoint: <code>{html_safe(pin)}</code></p>")
            parts.append(f'<p class="muted">{html_safe(flag.get("consequence") or "", 2000)}</p>')
        else:
            parts.append(f"<p>No exact flag: {html_safe(flag.get('refusal') or '', 2000)}</p>")
        parts.append(f'<p class="muted">{html_safe(flag.get("semantics") or "", 2000)}</p>')
    return "".join(parts)


def render_html(report: SpikeReport, plots: dict[str, bytes]) -> str:
    """The whole report.html, plots inlined as data: URIs."""
    figures = "".join(
        f"<h3>{_e(PLOT_TITLES.get(name, name))}</h3>"
        f'<img alt="{_e(name)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
        for name, png in plots.items()
    )
    note = ""
    if report.embedding_note:
        text = html_safe(report.embedding_note.get("text", ""), 600)
        note = f'<p class="muted">Embedding sample: {text}.</p>'
    rules = (
        f"<p><b>Verdict rule.</b> {html_safe(report.rules['verdict_rule'], 2000)}</p>"
        f"<p><b>Suspicion.</b> {html_safe(report.rules['suspicion_formula'], 2000)}</p>"
    )
    if report.rules.get("model_rule"):
        rules += f"<p><b>Model side.</b> {html_safe(report.rules['model_rule'], 2000)}</p>"
    from forensics.report.drilldown import CSS as DRILL_CSS
    from forensics.report.drilldown import drilldown_section
    from forensics.report.model_view import html_section

    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>Spike report: iteration {report.step}</title>"
        f"<style>{CSS}{DRILL_CSS}</style></head><body>"
        f"<h1>Spike report: iteration {report.step}</h1>{_stamp(report)}{_summary(report)}"
        f"{_notes(report)}"
        f"<h2>Plots</h2>{figures or '<p>No plots (no data for them).</p>'}"
        f"<h2>Clusters</h2>{_table(report)}{note}"
        f"<h2>Examples</h2>{_examples(report)}{drilldown_section(report)}{html_section(report)}"
        f"{_skip(report)}<h2>How the verdicts are made</h2>{rules}</body></html>\n"
    )
