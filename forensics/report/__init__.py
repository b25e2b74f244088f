"""The spike report: report.json, report.md (+ plot PNGs), report.html, and a terminal summary.

report = build_report(step, window, baseline, rollback, ranked, window_docs, baseline_docs,
                      replay=replay, assignments=assignments, embedding_note=note, loss=loss)
report.skip = ReportSkip.from_plan(plan)   # the spike pipeline's skip plan, when it has one
sections = write_report(report, out_dir)   # the report built once (report_sections), laid out
print_summary(report, console, sections, out_dir / "report.html")
"""

from __future__ import annotations

from pathlib import Path

from dataloaders.atomic import (
    atomic_path,
    write_bytes_atomic,
    write_parquet_atomic,
    write_text_atomic,
)
from forensics.errors import ForensicsError
from forensics.report.contents import SpikeReport, build_report
from forensics.report.documents import DOCUMENTS_FILE
from forensics.report.first_screen import summary_lines
from forensics.report.plots import render_plots
from forensics.report.render_html import render_html
from forensics.report.render_json import render_json
from forensics.report.render_md import render_markdown
from forensics.report.sections import Section, report_sections
from forensics.report.skip_view import ReportSkip
from forensics.report.terminal import print_summary

__all__ = ["ReportSkip", "SpikeReport", "build_report", "print_summary", "report_sections",
           "summary_lines", "write_report"]  # fmt: skip

PLOT_FILE = "report_{name}.png"


def write_report(
    report: SpikeReport,
    out_dir: str | Path,
    *,
    overwrite: bool = True,
    cache: Path | None = None,
) -> list[Section]:
    """Write report.json, report.md, its plot PNGs and report.html into `out_dir`.

    The sections are computed once (report_sections) and every file lays out that same list.
    Everything is rendered in memory first, then each file is written atomically (temporary
    file + rename), so a failure while rendering leaves no file behind and a reader never sees a
    half-written one. Returns the sections (the terminal summary lays them out too).
    `cache`: a folder where plots are kept by their inputs (render_plots), so a rerun that
    changed nothing a plot shows reads it back.
    """
    out = Path(out_dir)
    if not overwrite:
        for name in ("report.json", "report.md", "report.html"):
            if (out / name).exists():
                raise ForensicsError(f"{out / name}: already exists; pass --force to overwrite it")
    plots = render_plots(report, cache)
    plot_files = {name: PLOT_FILE.format(name=name) for name in plots}
    sections = report_sections(report, list(plots), cache)
    texts = {
        "report.json": render_json(report, sections, cache),
        "report.md": render_markdown(report, sections, plot_files),
        "report.html": render_html(report, sections, plots, cache),
    }
    written: dict[str, Path] = {}
    for name, png in plots.items():
        written[plot_files[name]] = write_bytes_atomic(
            out / plot_files[name], png, overwrite=overwrite
        )
    for name, text in texts.items():
        written[name] = write_text_atomic(out / name, text, overwrite=overwrite)
    if report.documents is not None:  # the drill-down's data, every window document
        written["documents"] = write_documents(report, out, overwrite)
    return sections


def write_documents(report: SpikeReport, out: Path, overwrite: bool) -> Path:
    """documents.parquet: a copy of the stage cache's file when the pipeline kept one (the
    same bytes on every run that reads it), else written from the frame."""
    target = out / DOCUMENTS_FILE
    if report.documents_file is None:
        return write_parquet_atomic(report.documents, target, overwrite=overwrite)
    import shutil

    with atomic_path(target, overwrite=overwrite) as tmp:
        shutil.copyfile(report.documents_file, tmp)
    return target
