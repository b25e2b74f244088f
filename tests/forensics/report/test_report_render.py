"""The spike report as people read it: report.html laid out by headless Chromium at a laptop's
viewport, report.md parsed by a Markdown parser, the terminal at 80 and 120 columns, on a real
spike run (forensics_testing/small_run.py, a rebuild) and on a generated window with hostile text,
a long restart line and a skip action.

The page is measured by the page itself (forensics_testing/browser.py): where the headline, the
action and its commands lie, whether each command and each restart file's line wraps inside its box
(no sideways scrolling, no number broken) and copies back as the one line it is, and the rendered
text, in which no HTML entity may show. One spike run's four outputs give the same counts.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import polars as pl
import pytest
from markdown_it import MarkdownIt
from test_report import make_report, with_action

from forensics.report import write_report
from forensics.report.first_screen import FLAG_CHARS
from forensics.report.sections import SECTION_ORDER
from forensics_testing.browser import CHROMIUM, VIEWPORT, probe, screenshot
from forensics_testing.small_run import REPO, cli, copy_run

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
    with_action(report, kind="skip", why="the culprit is confined to the window")
    out = tmp_path_factory.mktemp("generated")
    write_report(report, out)
    line = report.skip.line("megatron-lm")
    assert line and len(line) > FLAG_CHARS
    (out / "restart-megatron-lm.flags").write_text(line + "\n")  # as the spike pipeline does
    (out / "skip.json").write_text(json.dumps(report.skip.to_dict()))
    return out


@pytest.fixture(params=["small-run", "generated"])
def spike_dir(request: pytest.FixtureRequest) -> Path:
    if request.param == "small-run":
        return request.getfixturevalue("small_run") / "spike"
    return request.getfixturevalue("generated")


def _flag_lines(spike: Path) -> set[str]:
    """Every restart-<trainer>.flags's line: one line, flags only."""
    lines = set()
    for path in spike.glob("restart-*.flags"):
        text = path.read_text()
        assert text.endswith("\n") and text.count("\n") == 1 and "#" not in text
        lines.add(text.rstrip("\n"))
    return lines


@chromium
def test_first_screen_in_chromium(spike_dir: Path, tmp_path: Path) -> None:
    data = json.loads((spike_dir / "report.json").read_text())
    got = probe(spike_dir / "report.html", tmp_path)
    width, height = got["viewport"]
    assert width == VIEWPORT[0] and height <= VIEWPORT[1]
    # The headline, the action and its commands are on the first screen, in that order.
    assert got["headline"]["text"] == data["headline"]
    assert data["culprit_name"] in data["headline"]
    labels = got["labels"]
    assert labels["action"]["text"] == data["action"]
    assert [c["text"] for c in got["commands"]] == data["commands"] and data["commands"]
    tops = [got["headline"]["box"]["top"], labels["action"]["box"]["top"]]
    tops += [c["box"]["top"] for c in got["commands"]]
    assert tops == sorted(tops) and got["commands"][-1]["box"]["bottom"] <= height
    for command in got["commands"]:
        _wraps_and_pastes(command)
    # The stopgap, labelled as such, under the commands (a rebuild's skip flags).
    if data["stopgap_commands"]:
        assert labels["stopgap"]["box"]["top"] > got["commands"][-1]["box"]["bottom"]
        assert got["stopgap"]["text"] == data["stopgap_commands"][0]
        _wraps_and_pastes(got["stopgap"])
    # Then the reasons: the culprit, and the counts every output agrees on.
    assert labels["culprit"]["text"].startswith(data["culprit_name"])
    assert labels["culprit"]["box"]["top"] > got["commands"][-1]["box"]["bottom"]
    assert _counts(got["counts"]) == data["cluster_counts"]
    # Every trainer's block in "Skip and restart" is its restart file's line, the same way.
    assert _flag_lines(spike_dir) <= {block["copied"] for block in got["flags"]}
    for block in got["flags"]:
        _wraps_and_pastes(block)
    assert got["unselectable"] == []
    # What a reader sees (every folded section opened): no entity, hostile text shown as text.
    assert ENTITY.findall(got["text"]) == []
    if spike_dir.name.startswith("generated"):
        assert AWKWARD in got["text"] and "<script>alert(1)</script>" in got["text"]
        assert any(b["lines"] > 1 for b in got["flags"])  # the long line wraps
    else:
        assert got["drilldown"] >= 1
    assert [h for h in got["headings"] if h in SECTION_ORDER] == got["headings"]


def _wraps_and_pastes(box: dict) -> None:
    """Wrapped inside its box at spaces (no sideways scrolling, no word drawn across two
    lines), its start in sight, and copied back as the one line it is (a soft wrap adds no
    newline)."""
    assert box["scrollWidth"] <= box["clientWidth"], box
    assert box["broken"] == [], box
    assert 0 <= box["startsAt"] <= 12, box
    assert box["whiteSpace"] == "pre-wrap", box
    assert box["copied"] == box["text"] and "\n" not in box["copied"], box
    assert "\u2026" not in box["text"] and box["userSelect"] != "none"


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
    assert {line + "\n" for line in _flag_lines(spike_dir)} <= set(fences)
    skip = json.loads((spike_dir / "skip.json").read_text())
    block = [t for t in texts if t.startswith("BLOCK LIST ")]
    assert block == [f"BLOCK LIST {_count(skip['documents']):,} documents" + block[0].split(
        "documents", 1)[1]] and "in skip.json" in block[0]  # fmt: skip
    # The commands' box: the action's commands, in order, each whole on its own line.
    box = fences[0].splitlines()
    assert box[0] == f"# ACTION {data['action']}; run in this order:"
    assert [line for line in box if not line.startswith("# ")] == data["commands"]


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


# -- one spike run, four outputs, one set of numbers ---------------------------------------------

COUNTS = re.compile(
    r"(\d+) culprits?, (\d+) suspects?(?: \(\+(\d+) inside a culprit\))?, (\d+) clean; "
    r"(\d+) clusters"
)


def _counts(text: str) -> dict[str, int]:
    """summary.counts_text read back."""
    found = COUNTS.search(text)
    assert found, text
    culprit, suspect, inside, clean, total = (int(g or 0) for g in found.groups())
    return {"culprit": culprit, "suspect": suspect, "suspect_inside_culprit": inside,
            "clean": clean, "all": total}  # fmt: skip


@pytest.fixture(scope="module")
def terminal_run(small_run: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """`forensics spike` on a copy of the small run, as a user runs it, at 80 and 120 columns
    (the replay, scores and clusters come from its cache): stdout and the spike folder."""
    run = copy_run(small_run, tmp_path_factory.mktemp("term") / "run")
    out: dict = {"spike": run / "spike"}
    for width in (80, 120):
        done = cli("spike", "--step", "170", "--window", "40", "--embed-cap", "0", "--out",
                   str(run / "spike"), "--force", cwd=run,
                   env={"COLUMNS": str(width), "PYTHONPATH": str(REPO)})  # fmt: skip
        assert done.returncode == 0, done.stderr
        out[width] = done.stdout
    return out


@pytest.mark.parametrize("width", [80, 120])
def test_terminal_reads_on_one_screen(terminal_run: dict, width: int) -> None:
    """At most 25 rows at 80 and at 120 columns, no blank line, the headline first, the
    commands whole on their own lines, and report.html's file:// link last."""
    lines = terminal_run[width].splitlines()
    rows = sum(max(1, -(-len(line) // width)) for line in lines)
    assert rows <= 25 and "" not in lines, terminal_run[width]
    data = json.loads((terminal_run["spike"] / "report.json").read_text())
    assert " ".join(lines[:3]).startswith(data["headline"][: width - 1])
    assert set(data["commands"]) <= set(lines)
    uri = (terminal_run["spike"] / "report.html").resolve().as_uri()
    assert lines[-1] == f"report: {uri}"


def test_the_four_outputs_count_the_same_clusters(terminal_run: dict) -> None:
    """Culprits, suspects, suspects inside a culprit and clean clusters: the same numbers in the
    terminal, report.md, report.html and report.json, and the same as report.json's clusters
    counted; the tables' culprit and suspect rows are as many."""
    from forensics.report.render_json import counts_from_json

    spike = terminal_run["spike"]
    data = json.loads((spike / "report.json").read_text())
    counts = data["cluster_counts"]
    assert counts == counts_from_json(data)
    assert counts["culprit"] == 1 and counts["all"] == len(data["clusters"])
    terminal = [line for line in terminal_run[120].splitlines() if line.startswith("CLUSTERS")]
    assert [_counts(line) for line in terminal] == [counts]
    tokens = MarkdownIt("commonmark").enable("table").parse((spike / "report.md").read_text())
    md = "\n".join(_text(t) for t in tokens if t.type == "inline")  # as a reader sees it
    assert len(COUNTS.findall(md)) == 2  # the first screen's CLUSTERS line, the table's head
    assert {tuple(_counts(m.group()).values()) for m in COUNTS.finditer(md)} == {
        tuple(counts.values())
    }
    page = html.unescape((spike / "report.html").read_text())
    assert len(COUNTS.findall(page)) == 2
    assert {tuple(_counts(m.group()).values()) for m in COUNTS.finditer(page)} == {
        tuple(counts.values())
    }
    not_clean = counts["culprit"] + counts["suspect"] + counts["suspect_inside_culprit"]
    assert page.count('<tr class="culprit">') + page.count('<tr class="suspect">') == not_clean
    _, rows = _tables(tokens)[0]
    assert sum(r[1] in ("culprit", "suspect") for r in rows) == not_clean
    # The block list is said once, as what the window drew plus the rest of the culprit's.
    skip = json.loads((spike / "skip.json").read_text())
    blocked = sum(len(v) for v in skip["documents"].values())
    seen = skip["documents_seen_in_window"]
    said = f"{blocked:,} documents ({seen:,} drawn in the window + {blocked - seen:,} more"
    assert md.count(said) == 1 and page.count(said) == 1
    assert terminal_run[120].count(said) <= 1
