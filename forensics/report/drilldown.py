"""The drill-down: per culprit or suspect cluster, its documents with what a reviewer needs to
act on each: where it came from (source, URL, crawl batch: the manifest's facets, when present),
the iterations that drew it, the snippet around its first flagged span, the corrupted and the
template spans marked, and the command that writes its exact tokens.

`drill_groups` computes all of it before rendering (forensics.report.sections). report.html
shows every document whole in folded sections; report.md the first few per cluster.

Escaping happens exactly once, in `highlight`: each document is cut into plain and marked pieces
on the raw text (control characters neutralised first), and every piece goes through
`html.escape` before the `<mark>` tags around it are added.
"""

from __future__ import annotations

import html
import json
import re
import shlex
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from forensics.pipeline import cache_key, cached_bytes, content_digest, module_version
from forensics.pipeline.cache import keep_latest
from forensics.report.contents import cluster_name, corroborating_rows
from forensics.safe_text import _ANSI
from forensics.score import patterns as P
from forensics.score.locate import damage_spans

DOC_CHARS = 20_000  # a longer document is cut (whole in documents.parquet)
DOCS_PER_CLUSTER = 40  # flagged first; the rest are in documents.parquet
ITERATIONS_SHOWN = 12
SNIPPET_BEFORE, SNIPPET_AFTER = 80, 220  # characters around the first flagged span
FACETS = ("source", "url", "crawl_batch", "domain")  # the manifest's, shown when present
TEMPLATE_SHINGLE = 4  # words per shingle a template span is made of
TEMPLATE_SHARE = 0.5  # a shingle in at least this share of a cluster's documents is template
TEMPLATE_MIN_DOCS = 3
KEPT_SPANS = 400  # cached groups of marked spans (cached_spans): 20 groups of 20 runs
CSS = """
details.drill{border:1px solid #ddd;margin:8px 0;padding:4px 8px}
details.drill>summary{cursor:pointer;font-weight:bold}
pre.doc{white-space:pre-wrap;word-break:break-word;font-size:12px;background:#f7f7f7;
border:1px solid #eee;padding:6px;max-height:360px;overflow:auto}
mark{background:#ffd54f} mark.ctl{background:#ef9a9a} mark.tpl{background:#cfe3f7}
"""
# Control characters except newline and tab (kept: a document's layout is evidence too).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")
_WORD = re.compile(r"\S+")
Span = tuple[int, int, str]  # start, end, kind ("bad": corrupted, "tpl": template)


@dataclass(frozen=True)
class DrillDoc:
    """One document as the drill-down shows it (text raw; the renderer escapes)."""

    dataset: str
    doc_id: int
    facets: dict[str, str]
    iterations: list[int]
    garbage_score: float
    spam_score: float
    reasons: list[str]
    text: str
    spans: list[Span]
    snippet: tuple[int, int]  # the characters around the first flagged span
    tokens_command: str


@dataclass(frozen=True)
class DrillGroup:
    """A cluster worth opening: its row, name, label, how many window documents it holds and
    the first DOCS_PER_CLUSTER of them, flagged first."""

    id: str
    name: str
    label: str
    flagged_rate: float
    total: int
    docs: list[DrillDoc]
    opened: bool


def span_patterns() -> list[re.Pattern[str]]:
    """Mojibake (UTF-8 read as cp1252 / latin-1; ftfy's badness), replacement and private-use
    characters: the spans a garbage reason is about."""
    found = [re.compile(f"(?:{P.UTF8_AS_CP1252})+"), re.compile("[\ufffd\ue000-\uf8ff]+")]
    try:
        from ftfy.badness import BADNESS_RE

        found.append(BADNESS_RE)
    except ImportError:
        pass
    return found


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return merged


def marked_spans(text: str) -> list[tuple[int, int]]:
    """Sorted, merged (start, end) spans of `text` that any span pattern matches, with the
    control characters and legacy-codec mojibake `forensics.score.locate` finds."""
    return _merge(
        [
            (m.start(), m.end())
            for p in span_patterns()
            for m in p.finditer(text)
            if m.end() > m.start()
        ]
        + damage_spans(text)
    )


def _shingles(text: str) -> list[tuple[tuple[str, ...], int, int]]:
    """(words, start, end) of each TEMPLATE_SHINGLE-word run of `text`."""
    words = [(m.group(), m.start(), m.end()) for m in _WORD.finditer(text)]
    n = TEMPLATE_SHINGLE
    return [
        (tuple(w for w, _, _ in words[i : i + n]), words[i][1], words[i + n - 1][2])
        for i in range(len(words) - n + 1)
    ]


def template_spans(texts: list[str]) -> list[list[tuple[int, int]]]:
    """Per text, the spans its cluster shares as a template: runs of words whose
    TEMPLATE_SHINGLE-word shingles occur in at least TEMPLATE_SHARE of the texts (and in
    TEMPLATE_MIN_DOCS at least); what differs between them (the slot fillers) stays unmarked."""
    if len(texts) < TEMPLATE_MIN_DOCS:
        return [[] for _ in texts]
    per_text = [_shingles(t) for t in texts]
    seen = Counter(s for shingles in per_text for s in {w for w, _, _ in shingles})
    floor = max(TEMPLATE_MIN_DOCS, TEMPLATE_SHARE * len(texts))
    return [_merge([(a, b) for w, a, b in shingles if seen[w] >= floor]) for shingles in per_text]


def _snippet(text: str, spans: list[Span]) -> tuple[int, int]:
    """The characters around the first flagged span (the corrupted one first), or the start."""
    bad = [s for s in spans if s[2] == "bad"] or spans
    if not bad:
        return 0, min(len(text), SNIPPET_BEFORE + SNIPPET_AFTER)
    a, b, _ = bad[0]
    return max(0, a - SNIPPET_BEFORE), min(len(text), b + SNIPPET_AFTER)


def tokens_command(
    dataset: str, doc_id: int, iteration: int | None, config: str | None, tokens: bool = True
) -> str:
    """`forensics replay` of the iteration that drew the document: with --tokens (where the run
    can export them) its samples' exact token ids (tokens.npy) and where the document lies in
    them (segments.parquet); else the replay rows with each segment's token range and text."""
    if iteration is None:
        return ""
    parts = ["forensics", "replay", "--step", str(iteration), "--window", "1"]
    if config:
        parts += ["--config", config]
    parts += ["--out", f"replay-{iteration}.parquet"]
    if tokens:
        parts += ["--tokens", f"tokens-{iteration}"]
        return shlex.join(parts) + f"  # {dataset} doc {doc_id}: segments.parquet locates it"
    return shlex.join([*parts, "--text"]) + f"  # {dataset} doc {doc_id}: token_start, token_end"


def document_spans(texts: list[str]) -> list[list[Span]]:
    """Per text, its marked spans, sorted: the corrupted ones ("bad"), and the template ones
    its cluster shares ("tpl") where no corrupted span overlaps them."""
    out = []
    for text, template in zip(texts, template_spans(texts), strict=True):
        spans: list[Span] = [(a, b, "bad") for a, b in marked_spans(text)]
        bad = [(a, b) for a, b, _ in spans]
        spans += [(a, b, "tpl") for a, b in template if not any(a < y and x < b for x, y in bad)]
        spans.sort()
        out.append(spans)
    return out


def cached_spans(texts: list[str], cache: Path | None, code: str = "") -> list[list[Span]]:
    """document_spans, kept in `cache` by the texts and `code` (the version of the code that
    marks them): the shingles of every shown document are most of the drill-down's cost."""
    if cache is None:
        return document_spans(texts)

    key = cache_key(texts=content_digest(texts), code=code)

    def compute() -> bytes:
        return json.dumps(document_spans(texts)).encode()

    data = cached_bytes(cache / f"drill-{key}.json", compute)
    keep_latest(cache, "drill-*.json", KEPT_SPANS)
    return [[(int(a), int(b), str(k)) for a, b, k in doc] for doc in json.loads(data or b"[]")]


def _doc(row: dict[str, Any], spans: list[Span], config: str | None, tokens: bool) -> DrillDoc:
    text = row.get("text") or ""
    its = [int(i) for i in row.get("iterations") or []]
    facets = {k: str(row[k]) for k in FACETS if row.get(k) not in (None, "")}
    return DrillDoc(
        dataset=str(row["dataset"]),
        doc_id=int(row["doc_id"]),
        facets=facets,
        iterations=its,
        garbage_score=float(row.get("garbage_score") or 0.0),
        spam_score=float(row.get("spam_score") or 0.0),
        reasons=[r for r in (row.get("garbage_reason"), row.get("spam_reason")) if r],
        text=text,
        spans=spans,
        snippet=_snippet(text, spans),
        tokens_command=tokens_command(
            str(row["dataset"]), int(row["doc_id"]), its[0] if its else None, config, tokens
        ),
    )


def chosen_clusters(report: Any) -> pl.DataFrame:
    """Culprits, suspects that are not inside a culprit, and the embedding clusters the summary
    names as corroborating the culprit: the clusters worth opening."""
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


def group_label(row: dict[str, Any]) -> str:
    """The verdict as the first screen counts it: "suspect inside s8" for a suspect (or clean
    cluster) inside a culprit."""
    label = str(row.get("label") or row["verdict"])
    return f"{label} inside {row['explained_by']}" if row.get("explained_by") else label


def drill_groups(report: Any, cache: Path | None = None) -> list[DrillGroup]:
    """The drill-down's content, computed: one group per chosen cluster. `cache`: a folder
    where each group's marked spans are kept (cached_spans)."""
    docs = report.documents
    chosen = chosen_clusters(report)
    if docs is None or chosen.height == 0:
        return []

    config = report.run_config
    code = module_version("forensics") if cache is not None else ""
    totals, shown = group_documents(docs, chosen["id"].to_list())
    out = []
    for i, row in enumerate(chosen.iter_rows(named=True)):
        rows = shown.get(row["id"], [])
        spans = cached_spans([r.get("text") or "" for r in rows], cache, code)
        out.append(
            DrillGroup(
                id=str(row["id"]),
                name=cluster_name(row),
                label=group_label(row),
                flagged_rate=float(row["flagged_rate"]),
                total=totals.get(row["id"], 0),
                docs=[
                    _doc(r, t, config, report.token_export)
                    for r, t in zip(rows, spans, strict=True)
                ],  # fmt: skip
                opened=i == 0 and row["verdict"] == "culprit",
            )
        )
    return out


def group_documents(
    docs: pl.DataFrame | pl.LazyFrame, ids: list[str]
) -> tuple[dict[str, int], dict[str, list[dict[str, Any]]]]:
    """Per cluster of `ids`: how many documents it holds, and its first DOCS_PER_CLUSTER rows
    (unscored first, then flagged, then the rest; by doc_id within each, then file order).
    `docs` is documents.parquet's table, a scan at production scale: its membership columns
    are read once for every group, then only the rows shown."""
    lazy = docs.lazy().with_row_index("_at")
    order = pl.when(pl.col("flagged").is_null()).then(0).when(pl.col("flagged")).then(1)
    member = (
        lazy.select("_at", "doc_id", order.otherwise(2).alias("_o"), pl.col("clusters"))
        .explode("clusters")
        .filter(pl.col("clusters").is_in(ids))
        .collect(engine="streaming")  # every document's clusters, exploded, never held whole
    )
    totals = dict(member.group_by("clusters").len().iter_rows())
    top = (
        member.sort("_o", "doc_id", "_at")
        .group_by("clusters", maintain_order=True)
        .head(DOCS_PER_CLUSTER)
    )
    wanted = top["_at"].unique().implode()
    rows = lazy.filter(pl.col("_at").is_in(wanted)).collect()
    by_row = {r["_at"]: {k: v for k, v in r.items() if k != "_at"}
              for r in rows.iter_rows(named=True)}  # fmt: skip
    shown: dict[str, list[dict[str, Any]]] = {}
    for cluster, at in top.select("clusters", "_at").iter_rows():
        shown.setdefault(cluster, []).append(by_row[at])
    return totals, shown


# -- rendering (HTML) ---------------------------------------------------------------------------


def highlight(text: str | None, max_chars: int = DOC_CHARS, spans: list[Span] | None = None) -> str:
    """The document as escaped HTML with corrupted spans in <mark>, template spans in
    <mark class="tpl"> and control characters shown as marked U+FFFD; cut at `max_chars` with a
    note. `spans` default to the corrupted ones alone."""
    if not text:
        return ""
    cut = len(text) > max_chars
    raw = _ANSI.sub("\u241b", text[:max_chars])
    if spans is None:
        spans = [(a, b, "bad") for a, b in marked_spans(raw)]
    out, pos = [], 0
    for a, b, kind in spans:
        a, b = max(a, pos), min(b, len(raw))
        if b <= a:
            continue
        cls = ' class="tpl"' if kind == "tpl" else ""
        out.append(_plain(raw[pos:a]))
        out.append(f"<mark{cls}>{_plain(raw[a:b])}</mark>")
        pos = b
    out.append(_plain(raw[pos:]))
    if cut:
        out.append(f"\n[... cut at {max_chars:,} characters; whole in documents.parquet]")
    return "".join(out)


def _plain(piece: str) -> str:
    """Escape a piece once; control characters become a marked U+FFFD."""
    parts = _CONTROL.split(piece)
    return '<mark class="ctl">\ufffd</mark>'.join(html.escape(p, quote=True) for p in parts)


def iterations_text(its: list[int]) -> str:
    if not its:
        return "no window iteration"
    shown = ", ".join(str(i) for i in its[:ITERATIONS_SHOWN])
    more = f" and {len(its) - ITERATIONS_SHOWN} more" if len(its) > ITERATIONS_SHOWN else ""
    return f"iterations {shown}{more}"


def _document(doc: DrillDoc) -> str:
    e = html.escape
    facets = "".join(f" · {e(k)} {e(v)}" for k, v in doc.facets.items())
    head = (
        f"{e(doc.dataset)} doc {doc.doc_id}{facets} · garbage {doc.garbage_score:.2f} · "
        f"spam {doc.spam_score:.2f} · {iterations_text(doc.iterations)}"
    )
    why = e("; ".join(doc.reasons) or "not flagged")
    a, b = doc.snippet
    snippet = [(x - a, y - a, k) for x, y, k in doc.spans if x < b and y > a]
    part = doc.text[a:b]
    snip = ("… " if a else "") + highlight(part, len(part) + 1, snippet) + (
        " …" if b < len(doc.text) else "")  # fmt: skip
    cmd = (
        f'<div class="muted">exact tokens: <code class="cmd">{e(doc.tokens_command)}</code></div>'
        if doc.tokens_command
        else ""
    )
    return (
        f'<div class="muted">{head}<br>{why}</div><div class="ex">{snip}</div>{cmd}'
        f'<details><summary class="muted">whole document</summary>'
        f'<pre class="doc">{highlight(doc.text, spans=doc.spans)}</pre></details>'
    )


def drilldown_html(groups: list[DrillGroup]) -> str:
    """One <details> per group (the culprit's open): its documents with snippet, whole text,
    marks and the tokens command."""
    parts = []
    for g in groups:
        title = (
            f"{html.escape(g.id)}: {html.escape(g.name)} ({html.escape(g.label)}, "
            f"{g.total:,} documents, {100 * g.flagged_rate:.0f}% flagged)"
        )
        body = "".join(_document(d) for d in g.docs)
        more = g.total - len(g.docs)
        tail = f'<p class="muted">{more:,} more in documents.parquet.</p>' if more > 0 else ""
        opened = " open" if g.opened else ""
        parts.append(
            f'<details class="drill"{opened}><summary>{title}</summary>{body}{tail}</details>'
        )
    legend = (
        '<p class="muted">Marked: <mark>corrupted text</mark>, <mark class="tpl">text the '
        "cluster's documents share (template)</mark>.</p>"
        if groups
        else ""
    )
    return legend + "".join(parts)
