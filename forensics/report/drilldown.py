"""report.html's drill-down: one folded section per culprit or suspect cluster with its documents
whole, the corrupted spans marked, and the iterations that drew each.

Escaping happens exactly once, here: each document is cut into plain and marked pieces on the
raw text (control characters neutralised first), and every piece goes through `html.escape`
before the `<mark>` tags around it are added. Sections are `<details>` (no script: the page's CSP
forbids any), the culprit's open, the others folded.
"""

from __future__ import annotations

import html
import re
from typing import Any

import polars as pl

from forensics.safe_text import _ANSI

DOC_CHARS = 20_000  # a longer document is cut (whole in documents.parquet)
DOCS_PER_CLUSTER = 40  # flagged first; the rest are in documents.parquet
ITERATIONS_SHOWN = 12
CSS = """
details.drill{border:1px solid #ddd;margin:8px 0;padding:4px 8px}
details.drill>summary{cursor:pointer;font-weight:bold}
pre.doc{white-space:pre-wrap;word-break:break-word;font-size:12px;background:#f7f7f7;
border:1px solid #eee;padding:6px;max-height:360px;overflow:auto}
mark{background:#ffd54f} mark.ctl{background:#ef9a9a}
"""
# Control characters except newline and tab (kept: a document's layout is evidence too).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def span_patterns() -> list[re.Pattern[str]]:
    """Mojibake (UTF-8 read as cp1252 / latin-1; ftfy's badness), replacement and private-use
    characters: the spans a garbage reason is about."""
    from forensics.score import patterns as P

    found = [re.compile(f"(?:{P.UTF8_AS_CP1252})+"), re.compile("[\ufffd\ue000-\uf8ff]+")]
    try:
        from ftfy.badness import BADNESS_RE

        found.append(BADNESS_RE)
    except ImportError:
        pass
    return found


def marked_spans(text: str) -> list[tuple[int, int]]:
    """Sorted, merged (start, end) spans of `text` that any span pattern matches."""
    spans = sorted(
        (m.start(), m.end())
        for p in span_patterns()
        for m in p.finditer(text)
        if m.end() > m.start()
    )
    merged: list[tuple[int, int]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return merged


def highlight(text: str | None, max_chars: int = DOC_CHARS) -> str:
    """The document as escaped HTML with corrupted spans in <mark> and control characters shown
    as marked U+FFFD; cut at `max_chars` with a note."""
    if not text:
        return ""
    cut = len(text) > max_chars
    raw = _ANSI.sub("\u241b", text[:max_chars])
    out, pos = [], 0
    for a, b in marked_spans(raw):
        out.append(_plain(raw[pos:a]))
        out.append(f"<mark>{_plain(raw[a:b])}</mark>")
        pos = b
    out.append(_plain(raw[pos:]))
    if cut:
        out.append(f"\n[... cut at {max_chars:,} characters; whole in documents.parquet]")
    return "".join(out)


def _plain(piece: str) -> str:
    """Escape a piece once; control characters become a marked U+FFFD."""
    parts = _CONTROL.split(piece)
    return '<mark class="ctl">\ufffd</mark>'.join(html.escape(p, quote=True) for p in parts)


def _iterations(its: list[int] | None) -> str:
    if not its:
        return "no window iteration"
    shown = ", ".join(str(i) for i in its[:ITERATIONS_SHOWN])
    more = f" and {len(its) - ITERATIONS_SHOWN} more" if len(its) > ITERATIONS_SHOWN else ""
    return f"iterations {shown}{more}"


def _document(row: dict[str, Any]) -> str:
    reasons = [r for r in (row.get("garbage_reason"), row.get("spam_reason")) if r]
    head = (
        f"{html.escape(str(row['dataset']))} doc {int(row['doc_id'])} · "
        f"garbage {float(row.get('garbage_score') or 0):.2f} · "
        f"spam {float(row.get('spam_score') or 0):.2f} · {_iterations(row.get('iterations'))}"
    )
    why = html.escape("; ".join(reasons) or "not flagged")
    return (
        f'<div class="muted">{head}<br>{why}</div><pre class="doc">{highlight(row["text"])}</pre>'
    )


def chosen_clusters(report: Any) -> pl.DataFrame:
    """Culprits, suspects that are not inside a culprit, and the embedding clusters the summary
    names as corroborating the culprit: the clusters worth opening."""
    from forensics.report.model import corroborating_rows

    clusters = report.clusters
    if clusters.height == 0:
        return clusters
    top = report.culprit
    extra = [r["id"] for r in corroborating_rows(clusters, top)] if top else []
    parts = [
        clusters.filter(pl.col("verdict") == "culprit"),
        clusters.filter((pl.col("verdict") == "suspect") & pl.col("explained_by").is_null()),
    ]
    named = clusters.filter(pl.col("id").is_in(extra))
    chosen = pl.concat(parts, how="diagonal_relaxed")
    named = named.filter(~pl.col("id").is_in(chosen["id"].to_list()))
    return pl.concat([chosen, named], how="diagonal_relaxed")


def drilldown_section(report: Any) -> str:
    """<h2>Documents by cluster</h2> with one <details> per chosen cluster."""
    from forensics.report.model import cluster_name

    docs = getattr(report, "documents", None)
    chosen = chosen_clusters(report)
    if docs is None or chosen.height == 0:
        return ""
    parts = ["<h2>Documents by cluster</h2>"]
    for i, row in enumerate(chosen.iter_rows(named=True)):
        mine = docs.filter(pl.col("clusters").list.contains(row["id"]))
        mine = mine.sort(["flagged", "doc_id"], descending=[True, False])
        shown = mine.head(DOCS_PER_CLUSTER)
        more = mine.height - shown.height
        title = (
            f"{html.escape(row['id'])}: {html.escape(cluster_name(row))} "
            f"({html.escape(row.get('label') or row['verdict'])}, {mine.height:,} documents, "
            f"{100 * float(row['flagged_rate']):.0f}% flagged)"
        )
        body = "".join(_document(d) for d in shown.iter_rows(named=True))
        tail = f'<p class="muted">{more:,} more in documents.parquet.</p>' if more > 0 else ""
        opened = " open" if i == 0 and row["verdict"] == "culprit" else ""
        parts.append(
            f'<details class="drill"{opened}><summary>{title}</summary>{body}{tail}</details>'
        )
    return "".join(parts)
