"""The drill-down: documents.parquet (every window document) and report.html's folded sections
per culprit/suspect cluster with whole documents, corrupted spans marked and escaped once."""

from __future__ import annotations

import html
import re

import polars as pl

from forensics.cluster import cluster_sources
from forensics.cluster.baseline_fit import describe_fit, fitted_verdicts
from forensics.cluster.keywords import cluster_keywords
from forensics.cluster.verdict import culprit_docs
from forensics.report import build_report, write_report
from forensics.report.documents import documents_table
from forensics.report.drilldown import highlight
from forensics_testing.windows import generate_run

WINDOW = (80935, 81234)


def _report(tmp_path):
    run = generate_run(1200, 1200, dirty_share=0.08, hostile=True, seed=9)
    fit = describe_fit(WINDOW, (1, 300), [1, 81001], run.baseline.height, run.window.height)
    ranked = fitted_verdicts(
        cluster_sources(run.window, run.baseline), fit, run.window, run.replay, WINDOW
    )
    report = build_report(81234, WINDOW, (1, 300), 81000, ranked, run.window, run.baseline,
                          replay=run.replay)  # fmt: skip
    report.documents = documents_table(
        run.window, ranked, run.replay, culprit_docs(ranked, run.window)
    )
    write_report(report, tmp_path)
    return run, report


def test_documents_parquet_holds_every_window_document(tmp_path) -> None:
    run, report = _report(tmp_path)
    docs = pl.read_parquet(tmp_path / "documents.parquet")
    assert docs.height == run.window.height
    assert docs.select("dataset", "doc_id").is_unique().all()
    for col in ("verdict", "culprit", "flagged", "garbage_score", "spam_score", "clusters",
                "iterations", "samples", "text", "crawl_batch"):  # fmt: skip
        assert col in docs.columns, col
    blamed = docs.filter(pl.col("culprit").is_not_null())
    assert blamed.height and (blamed["verdict"] == "culprit").all()
    seen = run.replay.group_by("dataset", "doc_id").agg(pl.col("iteration").min().alias("m"))
    check = blamed.join(seen, on=["dataset", "doc_id"])
    assert (check["iterations"].list.first() == check["m"]).all()


def test_html_sections_show_whole_documents_escaped_once(tmp_path) -> None:
    _, report = _report(tmp_path)
    page = (tmp_path / "report.html").read_text()
    assert '<details class="drill" open>' in page and "<script>" not in page.split("<body>")[1]
    assert "&amp;lt;" not in page and "&amp;#x27;" not in page  # never escaped twice
    assert "iterations 8" in page  # the iterations each document appeared in
    clean_fold = re.search(r"<details><summary[^>]*>[\d,]+ clean clusters</summary>", page)
    assert clean_fold, "clean rows are folded away"


def test_highlight_marks_mojibake_and_escapes_the_rest() -> None:
    out = highlight("ZÃ¼rich <b>bold</b> \x1b[2J seÃ±or")
    assert "<mark>Ã¼</mark>" in out and "<mark>Ã±</mark>" in out
    assert "&lt;b&gt;bold&lt;/b&gt;" in out and "\x1b" not in out
    assert html.unescape(re.sub(r"</?mark[^>]*>", "", out)).startswith("ZÃ¼rich <b>")
    assert highlight("x" * 50, max_chars=10).endswith("whole in documents.parquet]")


def test_embedding_clusters_get_keywords() -> None:
    texts = ["solar panel install cost"] * 5 + ["python function returns list"] * 5
    docs = pl.DataFrame({"text": texts})
    ranked = pl.DataFrame(
        {
            "id": ["e0", "e1"],
            "kind": ["embedding"] * 2,
            "members": [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]],
        }
    )
    kw = dict(cluster_keywords(ranked, docs).iter_rows())
    assert set(kw["e0"]) <= {"solar", "panel", "install", "cost"} and len(kw["e0"]) == 3
    assert "python" in kw["e1"] or "function" in kw["e1"]


def test_each_document_says_where_it_came_from_and_how_to_get_its_tokens(tmp_path) -> None:
    """Per document: its manifest facets (source, crawl batch, domain), the iterations that drew
    it, the snippet around its first corrupted span, and the replay command for the iteration
    that drew it, with --tokens; report.md lists the first few the same way."""
    from forensics.report.drilldown import drill_groups

    _, report = _report(tmp_path)
    top = drill_groups(report)[0]
    assert top.label == "culprit" and top.opened and top.docs
    corrupted = [d for d in top.docs if any(kind == "bad" for _, _, kind in d.spans)]
    assert corrupted, "the dirty batch holds mojibake"
    for doc in top.docs:
        assert {"source", "crawl_batch", "domain"} <= set(doc.facets), doc.facets
        assert doc.tokens_command.startswith(
            f"forensics replay --step {doc.iterations[0]} --window 1 --out "
            f"replay-{doc.iterations[0]}.parquet --tokens tokens-{doc.iterations[0]}"
        )
    doc = corrupted[0]
    first = next(a for a, _, kind in doc.spans if kind == "bad")
    a, b = doc.snippet
    assert a <= first < b and b - a <= 80 + 220 + (doc.spans[0][1] - doc.spans[0][0])
    page = (tmp_path / "report.html").read_text()
    assert html.escape(doc.tokens_command) in page
    assert f"crawl_batch {html.escape(doc.facets['crawl_batch'])}" in page
    md = (tmp_path / "report.md").read_text()
    assert md.count("exact tokens: `forensics replay --step") >= 1


def test_template_spans_mark_what_a_clusters_documents_share() -> None:
    """The words a cluster's documents share (its template) are marked; the slot fillers that
    differ between them are not; fewer than three documents have no template."""
    from forensics.report.drilldown import template_spans

    cities = ["Boston", "Denver", "Austin", "Fresno"]
    texts = [f"Best cheap scooters in {c} today, call now for the lowest price in {c}"
             for c in cities]  # fmt: skip
    spans = template_spans(texts)
    for text, marks in zip(texts, spans, strict=True):
        marked = "".join(text[a:b] for a, b in marks)
        assert "cheap scooters" in marked and "lowest price" in marked
        city = text.index(cities[texts.index(text)])
        assert not any(a <= city < b for a, b in marks)
    assert template_spans(texts[:2]) == [[], []]
    out = highlight(texts[0], spans=[(a, b, "tpl") for a, b in spans[0]])
    assert '<mark class="tpl">' in out and "Boston" in re.sub(r"<mark[^>]*>.*?</mark>", "", out)
