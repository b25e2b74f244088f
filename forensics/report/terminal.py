"""The terminal summary: the report's sections laid out to fit one screen (TERMINAL_LINES rows at
the console's width), ending with report.html's path as a file:// link.

In the sections' order: the headline; the action's commands between two rules, each on a line
of its own and never wrapped by us (the terminal soft-wraps them, so a copied command is the
one line it is); the stopgap; the reasons; the notes; the clusters that are not clean; the link.
When that is more than a screen, the detail goes first: the notes, then the reasons'
continuation lines, then each reason is cut to one row, then reasons from the end; report.html
has all of it.

Every string that comes from data (cluster keys, reasons, flags) goes through
`forensics.safe_text` (control characters and ANSI/OSC sequences stripped) and rich markup is
escaped, so a crawled document cannot clear the screen or restyle the output.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from dataloaders.console import make_console
from forensics.report.contents import SpikeReport, cluster_name, cluster_rows
from forensics.report.drilldown import group_label
from forensics.report.first_screen import FirstScreen
from forensics.report.numbers import flagged_cell
from forensics.report.sections import CLUSTERS, FIRST_SCREEN, NOTES, Section, report_sections
from forensics.safe_text import excerpt

TERMINAL_LINES = 25  # rows the summary may take, the link included
TERMINAL_CLUSTERS = 4  # non-clean cluster rows shown (the rest: report.html)
TAIL_LABELS = ("CLUSTERS", "FIGURES")  # reasons shown with the cluster rows, whatever the room
LABEL = 11  # the label column, its space included
STYLE = {"culprit": "bold red", "suspect": "yellow", "clean": "green"}
Row = tuple[str, str]  # (plain text, rich markup): the plain text measures the rows


def _plain(text: object, max_chars: int = 2000) -> str:
    return excerpt(str(text), max_chars)


def _grid(label: str, text: str, width: int, one_row: bool = False) -> list[Row]:
    """A labelled line wrapped under its text, not under the labels."""
    wrapped = textwrap.wrap(_plain(text), max(20, width - LABEL)) or [""]
    if one_row and len(wrapped) > 1:
        wrapped = [textwrap.shorten(wrapped[0] + " " + wrapped[1], max(20, width - LABEL),
                                    placeholder=" …")]  # fmt: skip
    style = "bold red" if label in ("CULPRIT", "NO CULPRIT") else "bold"
    rows = []
    for i, part in enumerate(wrapped):
        lead = label if i == 0 else ""
        markup = f"[{style}]{escape(lead):<10}[/] " if lead else " " * LABEL
        rows.append((f"{lead:<10} {part}", markup + escape(part)))
    return rows


def rows_of(lines: list[Row], width: int) -> int:
    """Screen rows `lines` take at `width` (a longer line soft-wraps)."""
    return sum(max(1, math.ceil(len(plain) / width)) for plain, _ in lines)


def _box(screen: FirstScreen, width: int) -> list[Row]:
    """The commands between two rules, in order; each command whole on one line."""
    if not (screen.action or screen.commands):
        return []
    head = f"── ACTION {_plain(screen.action)} "
    head = head[: width - 1] if len(head) >= width else head + "─" * (width - len(head))
    rows: list[Row] = [(head, f"[bold]{escape(head)}[/]")]
    for i, c in enumerate(screen.commands, 1):
        note = f"# {i}. {_plain(c.note)}"
        rows += [(note, f"[dim]{escape(note)}[/]"), (_plain(c.text, 100_000),
                 escape(_plain(c.text, 100_000)))]  # fmt: skip
    rows.append(("─" * width, "─" * width))
    return rows


def _stopgap(screen: FirstScreen, width: int, brief: bool) -> list[Row]:
    rows: list[Row] = []
    for label, text in screen.stopgap:
        if label or not brief:
            rows += _grid(label, text, width)
    if screen.stopgap_command is not None:
        c = screen.stopgap_command
        note = f"# {_plain(c.note)}"
        text = _plain(c.text, 100_000)
        rows += [(note, f"[dim]{escape(note)}[/]"), (text, escape(text))]
    return rows


def _clusters(report: SpikeReport, width: int) -> list[Row]:
    """The clusters that are not clean (culprits, suspects, suspects inside a culprit)."""
    rows = [
        r for r in cluster_rows(report, limit=report.clusters.height) if r["verdict"] != "clean"
    ]
    out: list[Row] = []
    for r in rows[:TERMINAL_CLUSTERS]:
        label = group_label(r)
        line = (
            f"  {_plain(r['id'], 12):<5} {label:<18} {_plain(cluster_name(r), 60)}: "
            f"{r['docs']:,} docs, {flagged_cell(r)} flagged"
        )
        line = line if len(line) <= width else line[: width - 1] + "…"
        style = STYLE[r["verdict"]]
        out.append((line, f"[{style}]{escape(line)}[/]"))
    if len(rows) > TERMINAL_CLUSTERS:
        more = f"  and {len(rows) - TERMINAL_CLUSTERS} more that are not clean: report.html"
        out.append((more, escape(more)))
    return out


def _link(html: Path | None) -> Row:
    lead = "report: "
    if html is None:
        return (lead + "report.html", escape(lead) + "report.html")
    uri = Path(html).resolve().as_uri()
    return (lead + uri, f"{escape(lead)}[link={uri}]{escape(uri)}[/link]")


def _candidates(
    report: SpikeReport, screen: FirstScreen, notes: list[str], width: int
) -> list[list[Row]]:
    """The summary at decreasing detail; the first that fits a screen is printed. The cluster
    counts (the CLUSTERS reason) and, for a sampled window, which figures are exact (FIGURES,
    one row) always stand above the cluster rows."""
    head = [
        (line, f"[bold]{escape(line)}[/]") for line in textwrap.wrap(_plain(screen.headline), width)
    ]
    counts = [r for label, text in screen.reasons if label in TAIL_LABELS
              for r in _grid(label, text, width, label == "FIGURES")]  # fmt: skip
    reasons = [(label, text) for label, text in screen.reasons if label not in TAIL_LABELS]
    tail = counts + _clusters(report, width)
    full = [r for label, text in reasons for r in _grid(label, text, width)]
    labelled = [r for label, text in reasons if label for r in _grid(label, text, width)]
    cut = [r for label, text in reasons if label for r in _grid(label, text, width, True)]
    noted = [r for note in notes for r in _grid("note", note, width)]
    out = []
    for shown, with_notes, brief in ((full, True, False), (full, False, False),
                                     (labelled, False, True), (cut, False, True)):  # fmt: skip
        body = head + _box(screen, width) + _stopgap(screen, width, brief)
        out.append(body + shown + (noted if with_notes else []) + tail)
    base = head + _box(screen, width) + _stopgap(screen, width, True)
    for keep in range(len(cut) - 1, -1, -1):  # then reasons from the end
        out.append(base + cut[:keep] + tail)
    return out


def summary_rows(
    report: SpikeReport, sections: list[Section], width: int, html: Path | None = None
) -> list[Row]:
    """The rows print_summary prints: TERMINAL_LINES at most where anything fits."""
    data: dict[str, Any] = {s.key: s.data for s in sections}
    screen, notes = data[FIRST_SCREEN], data[NOTES]
    assert CLUSTERS in data  # the cluster rows come from the same report
    link = _link(html)
    budget = TERMINAL_LINES - rows_of([link], width)
    candidates = _candidates(report, screen, notes, width)
    chosen = next((c for c in candidates if rows_of(c, width) <= budget), candidates[-1])
    return [*chosen, link]


def print_summary(
    report: SpikeReport,
    console: Console | None = None,
    sections: list[Section] | None = None,
    html: Path | None = None,
) -> None:
    """Print the summary; `sections` as write_report returned them (computed when not given),
    `html` the report.html it ends with a link to."""
    console = console or make_console()
    sections = sections if sections is not None else report_sections(report)
    for _, markup in summary_rows(report, sections, console.width, html):
        console.print(markup, highlight=False, soft_wrap=True)
