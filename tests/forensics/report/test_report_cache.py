"""The report's parts kept by their inputs: report.json's clusters, the drill-down's marked spans
and HTML. Each reads back the same text it computes, and a changed input computes again."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from test_report import make_report

from forensics.pipeline import content_digest
from forensics.report import report_sections, write_report
from forensics.report.drilldown import document_spans
from forensics.report.render_json import render_json, report_dict


@pytest.fixture(scope="module")
def report():
    """A report with its drill-down (every window document)."""
    from forensics.cluster.verdict import culprit_docs
    from forensics.report.documents import documents_table

    run, report = make_report()
    blamed = culprit_docs(report.clusters, run.window)
    report.documents = documents_table(run.window, report.clusters, run.replay, blamed)
    return report


def test_report_json_is_one_encoding_of_the_report(report, tmp_path: Path) -> None:
    """The clusters spliced in as the last key: the same text json.dumps gives for the whole
    dict, with or without the cache, on the first run and when read back."""
    sections = report_sections(report)
    whole = report_dict(report, sections)
    expected = json.dumps(whole, indent=2, ensure_ascii=False, default=str) + "\n"
    assert whole["clusters"] and list(whole)[-1] == "clusters"
    assert render_json(report, sections) == expected
    assert render_json(report, sections, tmp_path) == expected  # written
    assert len(list(tmp_path.glob("clusters-*.json"))) == 1
    assert render_json(report, sections, tmp_path) == expected  # read back


def test_report_json_with_no_clusters(report) -> None:
    from dataclasses import replace

    empty = replace(report, clusters=report.clusters.clear(), examples=None, documents=None)
    sections = report_sections(empty)
    text = render_json(empty, sections)
    assert json.loads(text)["clusters"] == []
    assert text == json.dumps(report_dict(empty, sections), indent=2, ensure_ascii=False) + "\n"


def test_a_changed_cluster_encodes_again(report, tmp_path: Path) -> None:
    from dataclasses import replace

    sections = report_sections(report)
    render_json(report, sections, tmp_path)
    other = replace(report, clusters=report.clusters.with_columns(pl.lit(0.5).alias("suspicion")))
    text = render_json(other, report_sections(other), tmp_path)
    assert {c["suspicion"] for c in json.loads(text)["clusters"]} == {0.5}
    assert len(list(tmp_path.glob("clusters-*.json"))) == 2


def test_cached_report_files_are_the_uncached_ones(report, tmp_path: Path) -> None:
    """write_report with a cache folder, twice (computed, then read back), writes the bytes
    write_report without one writes; the drill-down's spans and HTML are among what it kept."""
    plain, cache = tmp_path / "plain", tmp_path / "cache"
    write_report(report, plain)
    for attempt in ("computed", "read back"):
        out = tmp_path / attempt
        write_report(report, out, cache=cache)
        for name in ("report.json", "report.md", "report.html", "documents.parquet"):
            assert (out / name).read_bytes() == (plain / name).read_bytes(), (attempt, name)
    assert list(cache.glob("drill-*.json")) and list(cache.glob("drill-*.html"))


def test_document_spans_mark_templates_and_damage() -> None:
    texts = [f"Buy cheap pills now at shop number {i} \x07 today" for i in range(4)]
    spans = document_spans(texts)
    kinds = {k for doc in spans for _, _, k in doc}
    assert kinds == {"bad", "tpl"}
    text = texts[0]
    assert any(text[a:b].startswith("Buy cheap pills") for a, b, k in spans[0] if k == "tpl")


def test_content_digest_ignores_memory_layout() -> None:
    """Equal frames hash the same however their columns lie in memory: sliced, in chunks,
    whatever a null's slot holds (a parquet round trip changes all three)."""
    frame = pl.DataFrame({"a": [1, None, 3], "s": ["x", None, "z"], "l": [["p"], [], ["q", "r"]]})
    laid_out = pl.concat(
        [
            pl.DataFrame({"a": [9, 1, 7], "s": ["y", "x", "w"], "l": [["o"], ["p"], ["n"]]})
            .with_columns(
                pl.when(pl.col("a") != 7).then(pl.col("a")).alias("a"),
                pl.when(pl.col("a") != 7).then(pl.col("s")).alias("s"),
            )
            .slice(1),
            pl.DataFrame({"a": [3], "s": ["z"], "l": [["q", "r"]]}),
        ],
        rechunk=False,
    )
    laid_out = laid_out.with_columns(pl.Series("l", [["p"], [], ["q", "r"]]))
    assert laid_out.equals(frame)
    assert content_digest(laid_out) == content_digest(frame)
    assert content_digest(frame.with_columns(pl.lit(2).alias("a"))) != content_digest(frame)


def test_content_digest_of_a_frame_in_slices_is_the_whole_frames(monkeypatch) -> None:
    """A big frame is hashed DIGEST_ROWS rows at a time (a window's replay rows are tens of
    millions): the digest is the one of the frame hashed whole."""
    import forensics.pipeline.cache as cache

    frame = pl.DataFrame({"i": range(10), "x": [0.1 * i for i in range(10)],
                          "s": [str(i) for i in range(10)]})  # fmt: skip
    whole = content_digest(frame)
    monkeypatch.setattr(cache, "DIGEST_ROWS", 3)
    assert content_digest(frame) == whole
    assert content_digest(frame.with_columns(pl.col("i").shift(1, fill_value=0))) != whole
    assert content_digest(frame.head(0)) != content_digest(frame.head(0).drop("s"))
