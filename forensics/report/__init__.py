"""The spike report: report.json, report.md (+ plot PNGs), report.html, and a terminal summary.

report = build_report(step, window, baseline, rollback, ranked, window_docs, baseline_docs,
                      replay=replay, assignments=assignments, embedding_note=note, loss=loss)
report.skip = {...}            # the spike pipeline's skip section, when it has one
write_report(report, out_dir)
print_summary(report, console)
"""

from __future__ import annotations

from pathlib import Path

from forensics.report.model import SpikeReport, build_report
from forensics.report.summary import summary_lines
from forensics.report.terminal import print_summary

__all__ = ["SpikeReport", "build_report", "print_summary", "summary_lines", "write_report"]

PLOT_FILE = "report_{name}.png"


def write_report(
    report: SpikeReport, out_dir: str | Path, *, overwrite: bool = True
) -> dict[str, Path]:
    """Write report.json, report.md, its plot PNGs and report.html into `out_dir`.

    Everything is rendered in memory first, then each file is written atomically (temporary
    file + rename), so a failure while rendering leaves no file behind and a reader never sees a
    half-written one. Returns name -> path of what was written.
    """
    from dataloaders.atomic import write_bytes_atomic, write_text_atomic
    from forensics.report.plots import render_plots
    from forensics.report.render_html import render_html
    from forensics.report.render_json import render_json
    from forensics.report.render_md import render_markdown

    out = Path(out_dir)
    if not overwrite:
        for name in ("report.json", "report.md", "report.html"):
            if (out / name).exists():
                from forensics.errors import ForensicsError

                raise ForensicsError(f"{out / name}: already exists; pass --force to overwrite it")
    plots = render_plots(report)
    plot_files = {name: PLOT_FILE.format(name=name) for name in plots}
    texts = {
        "report.json": render_json(report),
        "report.md": render_markdown(report, plot_files),
        "report.html": render_html(report, plots),
    }
    written: dict[str, Path] = {}
    for name, png in plots.items():
        written[plot_files[name]] = write_bytes_atomic(
            out / plot_files[name], png, overwrite=overwrite
        )
    for name, text in texts.items():
        written[name] = write_text_atomic(out / name, text, overwrite=overwrite)
    if report.documents is not None:  # the drill-down's data, every window document
        from dataloaders.atomic import write_parquet_atomic
        from forensics.report.documents import DOCUMENTS_FILE

        written[DOCUMENTS_FILE] = write_parquet_atomic(
            report.documents, out / DOCUMENTS_FILE, overwrite=overwrite
        )
    return written
