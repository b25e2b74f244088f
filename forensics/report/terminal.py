"""The short terminal summary: the first screen and the top clusters, as a rich table.

Every string that comes from data (cluster keys, reasons, flags) goes through
`forensics.safe_text.terminal_safe`, which strips ANSI/OSC sequences and control characters
and escapes rich markup, so a crawled document cannot clear the screen or restyle the output.
"""

from __future__ import annotations

import polars as pl
from rich.console import Console
from rich.table import Table

from dataloaders.console import make_console
from forensics.report.model import SpikeReport, cluster_name, cluster_rows, format_p
from forensics.report.summary import summary_lines
from forensics.safe_text import terminal_safe

TERMINAL_ROWS = 10
EXAMPLE_CHARS = 120
STYLE = {"culprit": "bold red", "suspect": "yellow", "clean": "green"}


def print_summary(report: SpikeReport, console: Console | None = None) -> None:
    """Print the first screen and a table of the top clusters."""
    console = console or make_console()
    # A two-column grid, so a long line wraps under its text, not under the labels.
    screen = Table.grid(padding=(0, 1))
    screen.add_column(width=10, no_wrap=True)
    screen.add_column(overflow="fold")
    for label, text in summary_lines(report):
        style = "bold red" if label in ("CULPRIT", "NO CULPRIT") else "bold"
        screen.add_row(f"[{style}]{label}[/]" if label else "", terminal_safe(text, 600))
    top = report.culprit
    if top is not None and report.examples is not None:
        for ex in (
            report.examples.filter(report.examples["cluster"] == top["id"])
            .head(2)
            .iter_rows(named=True)
        ):
            screen.add_row(
                "e.g.",
                f"{terminal_safe(ex['dataset'], 40)} doc {int(ex['doc_id'])}: "
                f"{terminal_safe(ex['excerpt'], EXAMPLE_CHARS)}",
            )
    for note in report.notes:
        screen.add_row("[dim]note[/]", terminal_safe(note, 600))
    console.print(screen, highlight=False)
    table = Table(title="Top clusters (by suspicion)", show_lines=False)
    for col in ("id", "verdict", "cluster", "docs", "window", "baseline", "p", "flagged",
                "suspicion"):  # fmt: skip
        table.add_column(col, justify="right" if col in ("docs", "suspicion") else "left")
    for r in cluster_rows(report, TERMINAL_ROWS, explained=False):
        table.add_row(
            terminal_safe(r["id"], 12),
            f"[{STYLE[r['verdict']]}]{r.get('label') or r['verdict']}[/]",
            terminal_safe(cluster_name(r), 60),
            f"{r['docs']:,}",
            f"{100 * r['window_share']:.2f}%",
            f"{100 * r['baseline_share']:.2f}%",
            format_p(r["p_value"]),
            f"{100 * r['flagged_rate']:.0f}%",
            f"{r['suspicion']:.3f}",
        )
    console.print(table)
    inside = report.clusters.filter(pl.col("explained_by").is_not_null()).height
    if inside:
        console.print(f"({inside} more clusters lie inside a culprit; see report.html)")
