"""The scan's report: the flagged share over iterations with the dense stretches marked, the
stretches a skip list would drop, and the sources that put the most flagged documents ahead.

report.md and report.html say the same thing; the plot is scan.png (embedded in the HTML).
Everything that comes from data (source names, reasons) is escaped (forensics.safe_text).
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import polars as pl

from dataloaders.atomic import write_bytes_atomic, write_text_atomic
from forensics.safe_text import excerpt, html_safe
from forensics.scan.shard import KINDS

COLOURS = {
    "flagged": "#222222",
    "garbage": "#d62728",
    "spam": "#ff7f0e",
    "ngram": "#9467bd",
    "instance_ngram": "#1f77b4",
}


def plot_png(scan: pl.DataFrame, ranges: list[list[int]], threshold: float) -> bytes:
    """Flagged share per iteration (all kinds, and each kind), threshold, stretches shaded."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 3.6), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    x = scan["iteration"].to_numpy()
    for a, b in ranges:
        ax.axvspan(a - 0.5, b + 0.5, color="#d62728", alpha=0.12, lw=0)
    for kind in KINDS:
        y = scan[f"{kind}_share"].to_numpy()
        if y.any():
            ax.plot(x, y, lw=0.8, color=COLOURS[kind], label=kind.replace("_", " "))
    ax.plot(x, scan["flagged_share"].to_numpy(), lw=1.4, color=COLOURS["flagged"], label="any")
    ax.axhline(threshold, color="#888888", ls="--", lw=0.8, label=f"threshold {threshold:g}")
    ax.set_xlabel("iteration")
    ax.set_ylabel("flagged share of samples")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(x.min() - 0.5, x.max() + 0.5)
    ax.legend(loc="upper right", fontsize=8, ncols=3)
    ax.set_title("flagged share ahead (shaded: dense stretches in skip.json)", fontsize=10)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _stretch_lines(skip: dict[str, Any]) -> list[str]:
    out = []
    for s in skip["stretches"]:
        kinds = ", ".join(f"{k} {100 * v:.0f}%" for k, v in s["kinds"].items())
        out.append(
            f"iterations {s['first']}-{s['last']} ({s['iterations']}): "
            f"{100 * s['flagged_share']:.0f}% of samples flagged ({kinds})"
        )
    return out


def _whole(line: str) -> str:
    """A flag line for HTML, whole (never cut with an ellipsis): one line that scrolls."""
    return html_safe(line, len(line) + 1)


def write_report(
    out: Path,
    scan: pl.DataFrame,
    skip: dict[str, Any],
    docs: pl.DataFrame,
    sources: pl.DataFrame,
    threshold: float,
) -> None:
    png = plot_png(scan, skip["iterations"], threshold)
    write_bytes_atomic(out / "scan.png", png)
    first, last = skip["scope"]
    samples = int(scan["samples"].sum())
    flagged = int(scan["flagged_samples"].sum())
    lines = _stretch_lines(skip)
    coll = skip["collateral"]
    head = (
        f"Scanned iterations {first}-{last}: {samples:,} samples, {flagged:,} flagged "
        f"({100 * flagged / max(samples, 1):.2f}%); {docs.height:,} flagged documents in the "
        "block list."
    )
    verdict = (
        f"{len(lines)} dense stretch(es) above {threshold:g}: skipping "
        f"{coll['iterations_skipped']} iterations drops {coll['culprit_samples_skipped']:,} "
        f"flagged samples and {coll['clean_samples_skipped']:,} clean ones."
        if lines
        else f"No stretch has more than {threshold:g} of its samples flagged: nothing to skip."
    )
    md = ["# forensics scan", "", head, "", verdict, ""]
    md += [f"- {line}" for line in lines]
    md += ["", "![flagged share](scan.png)", "", "## Top offending sources", ""]
    md += ["| facet | value | segments | flagged | share |", "|---|---|---|---|---|"]
    for r in sources.iter_rows(named=True):
        md.append(
            f"| {r['facet']} | {excerpt(r['key'], 80).replace('|', '/')} | {r['segments']:,} | "
            f"{r['flagged_segments']:,} | {100 * r['flagged_share']:.1f}% |"
        )
    md += ["", f"Skip flags (restart from iteration {skip['rollback']['iteration']}):", ""]
    for name, flag in skip["flags"].items():
        shown = flag["flag"] or f"(none: {flag['refusal']})" if skip["iterations"] else "(none)"
        md.append(f"- {name}: `{shown}`")
    md += ["", *[f"- note: {n}" for n in skip["notes"]], ""]
    write_text_atomic(out / "report.md", "\n".join(md))

    rows = "".join(
        f"<tr><td>{html_safe(r['facet'])}</td><td>{html_safe(r['key'], 120)}</td>"
        f"<td>{r['segments']:,}</td><td>{r['flagged_segments']:,}</td>"
        f"<td>{100 * r['flagged_share']:.1f}%</td></tr>"
        for r in sources.iter_rows(named=True)
    )
    items = "".join(f"<li>{html_safe(line, 400)}</li>" for line in lines)
    html = (
        "<!doctype html><html><head><meta charset='utf-8'><title>forensics scan</title>"
        "<style>body{font-family:sans-serif;max-width:1150px;margin:2em auto}"
        "td,th{padding:2px 10px;text-align:left}pre{white-space:pre;overflow-x:auto}</style>"
        "</head><body>"
        f"<h1>forensics scan {first}-{last}</h1><p>{html_safe(head, 1000)}</p>"
        f"<p><b>{html_safe(verdict, 1000)}</b></p><ul>{items}</ul>"
        f"<img alt='flagged share' src='data:image/png;base64,{base64.b64encode(png).decode()}'>"
        "<h2>Top offending sources</h2><table><tr><th>facet</th><th>value</th><th>segments</th>"
        f"<th>flagged</th><th>share</th></tr>{rows}</table>"
        f"<h2>Skip flags (restart from iteration {skip['rollback']['iteration']})</h2>"
        + "".join(
            f"<p>{html_safe(name)}:</p><pre>{_whole(flag['flag'] or '(none)')}</pre>"
            for name, flag in skip["flags"].items()
        )
        + "".join(f"<p>note: {html_safe(n, 1000)}</p>" for n in skip["notes"])
        + "</body></html>"
    )
    write_text_atomic(out / "report.html", html)
