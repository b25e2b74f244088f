"""The spike report as people read it: report.html laid out by headless Chromium at a
laptop's viewport, report.md parsed by a Markdown parser, on a real spike run (tests/small_run.py,
a rebuild) and on a generated window with hostile text, a long paste line and a skip action.

The page is measured by the page itself (tests/browser.py): where the culprit and the action lie,
whether the paste line is the restart file's line whole, on one selectable line that no number
is wrapped in, and the rendered text, in which no HTML entity may show.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import polars as pl
import pytest
from browser import CHROMIUM, VIEWPORT, probe, screenshot
from markdown_it import MarkdownIt
from test_report import make_report

from forensics.report import write_report
from forensics.report.sections import SECTION_ORDER
from forensics.report.summary import FLAG_CHARS
from forensics.skip.flags import restart_line

ENTITY = re.compile(r"&(?:[A-Za-z][A-Za-z0-9]*|#[0-9]+|#[xX][0-9A-Fa-f]+);")
# Text from a manifest that HTML and Markdown both have to escape exactly once.
AWKWARD = 'manifest field O\'Brien & Sons "quoted" <b>bold?</b> 5 < 6 & done'
CLUSTER_HEAD = ["id", "verdict", "cluster", "docs", "window", "baseline", "enrichment", "p",
                "samples / expected",
                "flagged", "garbage", "spam", "suspicion", "note"]  # fmt: skip
chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated window's report: hostile documents, a note that needs escaping, a paste line
    longer than FLAG_CHARS (report.md points at the file; the page shows it whole) and the skip
    action."""
    _, report = make_report(seed=24)
    report.notes.append(AWKWARD)
    report.skip["action"] = {"kind": "skip", "why": "the culprit is confined to the window"}
    out = tmp_path_factory.mktemp("generated")
    write_report(report, out)
    line = restart_line(report.skip["flags"]["megatron-lm"])
    assert line and len(line) > FLAG_CHARS
    (out / "restart-megatron-lm.flags").write_text(line + "\n")  # as the spike pipeline does
    (out / "skip.json").write_text(json.dumps(report.skip))
    return out


@pytest.fixture(params=["small-run", "generated"])
def spike_dir(request: pytest.FixtureRequest) -> Path:
    if request.param == "small-run":
        return request.getfixturevalue("small_run") / "spike"
    return request.getfixturevalue("generated")


def _expected(spike: Path) -> tuple[str, str, str]:
    """(culprit name, action wording, the chosen trainer's restart line) from the outputs."""
    data = json.loads((spike / "report.json").read_text())
    top = next(c for c in data["clusters"] if c["id"] == data["culprit"])
    skip = json.loads((spike / "skip.json").read_text())
    kind = skip["action"]["kind"]
    wording = {"rebuild": "remove and rebuild", "skip": "skip"}[kind]
    line = (spike / f"restart-{skip['trainer']}.flags").read_text()
    assert line.endswith("\n") and line.count("\n") == 1 and "#" not in line
    return f"{top['facet']}={top['key']}", wording, line.rstrip("\n")


@chromium
def test_first_screen_in_chromium(spike_dir: Path, tmp_path: Path) -> None:
    culprit, action, paste = _expected(spike_dir)
    got = probe(spike_dir / "report.html", tmp_path)
    width, height = got["viewport"]
    assert width == VIEWPORT[0] and height <= VIEWPORT[1]
    # The culprit and the action are on the first screen.
    labels = got["labels"]
    assert labels["culprit"]["text"].startswith(culprit)
    assert labels["action"]["text"].startswith(action)
    assert labels["culprit"]["box"]["bottom"] <= height
    assert labels["action"]["box"]["bottom"] <= height
    # The paste line is the restart file's line, whole, on one selectable line that scrolls.
    line = got["paste"]
    assert line["text"] == paste and "\u2026" not in line["text"]
    _one_whole_line(line)
    assert line["userSelect"] != "none"
    # Every trainer's block in "Skip and restart" is its restart file's line, the same way.
    files = {p.read_text().rstrip("\n") for p in spike_dir.glob("restart-*.flags")}
    assert files <= {block["text"] for block in got["flags"]}
    for block in got["flags"]:
        _one_whole_line(block)
    assert got["unselectable"] == []
    # What a reader sees (every folded section opened): no entity, hostile text shown as text.
    assert ENTITY.findall(got["text"]) == []
    if spike_dir.name.startswith("generated"):
        assert AWKWARD in got["text"] and "<script>alert(1)</script>" in got["text"]
    else:
        assert got["drilldown"] >= 1
    assert [h for h in got["headings"] if h in SECTION_ORDER] == got["headings"]


def _one_whole_line(box: dict) -> None:
    """Laid out on one line (it scrolls sideways when longer) that starts in sight, no number
    broken anywhere."""
    assert box["lines"] == 1, box
    assert 0 <= box["startsAt"] <= 12, box  # its start is in sight, not scrolled or indented away
    assert box["whiteSpace"] in ("pre", "nowrap"), box
    assert box["wordBreak"] != "break-all" and box["overflowWrap"] not in ("anywhere", "break-word")
    assert box["overflowX"] in ("auto", "scroll") or box["scrollWidth"] <= box["clientWidth"]


@chromium
def test_first_screen_screenshot_reads(spike_dir: Path, tmp_path: Path) -> None:
    """The first screen as it ships (CSP on): the summary's red rule and text, not a blank page;
    kept beside the test's files to look at."""
    from matplotlib.image import imread

    shot = screenshot(spike_dir / "report.html", tmp_path / "first-screen.png")
    rgb = imread(shot)[..., :3]
    assert rgb.shape[:2] == (VIEWPORT[1], VIEWPORT[0])
    red = (rgb[..., 0] > 0.75) & (rgb[..., 1] < 0.35) & (rgb[..., 2] < 0.35)
    assert red[:, 20:40].sum(axis=0).max() > 400  # the summary's left rule runs down the screen
    assert (rgb.sum(axis=2) < 1.5).mean() > 0.01  # dark text


# -- report.md through a Markdown parser ---------------------------------------------------------


def _tables(tokens: list) -> list[tuple[list[str], list[list[str]]]]:
    """Each table as (header cells, body rows), every cell as the text a reader sees."""
    tables: list = []
    cells: list[list[str]] = []
    row: list[str] | None = None
    head: list[list[str]] = []
    for tok in tokens:
        if tok.type == "thead_close":
            head, cells = cells, []
        elif tok.type == "tr_open":
            row = []
        elif tok.type == "inline" and row is not None:
            row.append(_text(tok))
        elif tok.type == "tr_close":
            cells.append(row)
            row = None
        elif tok.type == "table_close":
            tables.append(([c for r in head for c in r], cells))
            cells, row = [], None
    return tables


def _text(inline) -> str:  # noqa: ANN001 - a markdown_it Token
    return "".join(c.content for c in inline.children or [] if c.type in ("text", "code_inline"))


def _headings(tokens: list, level: str) -> list[str]:
    return [tokens[i + 1].content for i, t in enumerate(tokens)
            if t.type == "heading_open" and t.tag == level]  # fmt: skip


def test_report_md_reads_with_a_markdown_parser(spike_dir: Path) -> None:
    tokens = MarkdownIt("commonmark").enable("table").parse((spike_dir / "report.md").read_text())
    data = json.loads((spike_dir / "report.json").read_text())
    tables = _tables(tokens)
    assert tables, "report.md has no table a parser reads as one"
    head, rows = tables[0]
    assert head == CLUSTER_HEAD and all(len(r) == len(CLUSTER_HEAD) for r in rows)
    clusters = {c["id"]: c for c in data["clusters"]}
    assert len(rows) == min(30, len(clusters))
    assert [r[0] for r in rows][0] == data["culprit"]
    for r in rows:  # the docs column is report.json's count
        assert int(r[3].replace(",", "")) == clusters[r[0]]["docs"], r
    docs_file = spike_dir / "documents.parquet"
    if docs_file.exists():  # ... and documents.parquet's
        docs = pl.read_parquet(docs_file, columns=["clusters"])
        for r in rows:
            assert docs.filter(pl.col("clusters").list.contains(r[0])).height == int(r[3]), r
    # What a reader sees: no entity, no escape backslash, in any cell or any text at all.
    texts = [_text(t) for t in tokens if t.type == "inline"]
    assert [t for t in texts if ENTITY.search(t) or "\\" in t] == []
    if spike_dir.name.startswith("generated"):
        assert any(AWKWARD in t for t in texts)
    # Where users copy from (fenced blocks) no line is cut, and every flag block is its file.
    fences = [t.content for t in tokens if t.type == "fence"]
    assert fences and all("\u2026" not in f for f in fences)
    files = {p.read_text() for p in spike_dir.glob("restart-*.flags")}
    assert files <= set(fences)
    skip = json.loads((spike_dir / "skip.json").read_text())
    assert f"block list: {_count(skip['documents'])} documents" in fences[0]


def _count(documents: int | dict) -> int:
    return documents if isinstance(documents, int) else sum(len(v) for v in documents.values())


def test_md_and_html_have_the_same_sections_in_the_same_order(spike_dir: Path) -> None:
    tokens = MarkdownIt("commonmark").enable("table").parse((spike_dir / "report.md").read_text())
    page = (spike_dir / "report.html").read_text()
    in_html = [html.unescape(h) for h in re.findall(r"<h2>(.*?)</h2>", page)]
    in_md = _headings(tokens, "h2")
    assert in_md == in_html
    assert [h for h in SECTION_ORDER if h in in_md] == in_md
    assert {"Plots", "Clusters", "Examples", "Skip and restart"} <= set(in_md)
    assert _headings(tokens, "h1") == [html.unescape(re.findall(r"<h1>(.*?)</h1>", page)[0])]
