"""The report's sections, in the one order report.md and report.html both follow, and the two
sections report.md lacked (documents by cluster, skip and restart), in Markdown.

    summary, notes, Plots, Clusters, Examples, Documents by cluster, [What the model choked
    on], Skip and restart, How the verdicts are made
"""

from __future__ import annotations

from typing import Any

import polars as pl

from forensics.report.drilldown import chosen_clusters
from forensics.report.model import cluster_name, format_value
from forensics.safe_text import fence_safe, md_code, md_safe
from forensics.skip.flags import restart_line

SECTION_ORDER = (
    "Plots",
    "Clusters",
    "Examples",
    "Documents by cluster",
    "What the model choked on",
    "Skip and restart",
    "How the verdicts are made",
)


def documents_markdown(report: Any) -> str:
    """Per culprit/suspect cluster: its documents' count, flagged share and the first few ids
    with the iterations that drew them; the texts are in report.html and documents.parquet."""
    docs = getattr(report, "documents", None)
    chosen = chosen_clusters(report) if report.clusters.height else report.clusters
    if docs is None or chosen.height == 0:
        return ""
    out = ["## Documents by cluster\n"]
    for row in chosen.iter_rows(named=True):
        mine = docs.filter(pl.col("clusters").list.contains(row["id"])).sort(
            ["flagged", "doc_id"], descending=[True, False]
        )
        label = row.get("label") or row["verdict"]
        out.append(
            f"- {md_safe(row['id'])}: {md_safe(cluster_name(row), 120)} ({label}): "
            f"{mine.height:,} window documents, {100 * float(row['flagged_rate']):.0f}% flagged"
        )
        for d in mine.head(5).iter_rows(named=True):
            its = d.get("iterations") or []
            shown = ", ".join(str(i) for i in its[:6]) + (" ..." if len(its) > 6 else "")
            out.append(f"  - {md_code(d['dataset'], 60)} doc {d['doc_id']}: iterations {shown}")
    out.append("\nWhole documents, corrupted spans marked: report.html; every window document: "
               "documents.parquet.\n")  # fmt: skip
    return "\n".join(out)


def skip_markdown(report: Any) -> str:
    """Skip and restart: the action, the ranges, and every trainer's whole flag in a fence."""
    skip = report.skip
    if not skip:
        return ""
    out = ["## Skip and restart\n"]
    action = skip.get("action") or {}
    if action.get("kind"):
        first = action.get("command") or "skip the iterations below"
        out.append(f"First: **{md_safe(action['kind'])}**: {md_code(first, 400)}\n")
        out.append(f"{md_safe(action.get('why', ''), 600)}\n")
    if skip.get("iterations"):
        ranges = ", ".join(f"{a}-{b}" for a, b in skip["iterations"])
        out.append(f"Skip iterations: {md_safe(ranges, 4000)}\n")
    for key in ("collateral",):
        if isinstance(skip.get(key), dict) and skip[key]:
            out += [f"- {md_safe(k.replace('_', ' '))}: {md_safe(format_value(v))}"
                    for k, v in skip[key].items()]  # fmt: skip
            out.append("")
    flags = skip.get("flags") or {}
    for name, flag in flags.items() if skip.get("iterations") else ():
        chosen = " (this run's trainer)" if name == skip.get("trainer") else ""
        out.append(f"### {md_safe(name)}{chosen}: restart-{md_safe(name)}.flags\n")
        line = restart_line(flag)
        if line:  # whole, as restart-<trainer>.flags holds it
            pin = flag.get("pin") or ""
            out.append("~~~text\n" + fence_safe(line, len(line) + 1) + "\n~~~\n")
            if pin and not pin.startswith("--"):
                out.append(f"Load the rollback checkpoint: {md_code(pin)}\n")
        else:
            out.append(f"No exact flag: {md_safe(flag.get('refusal') or '', 2000)}\n")
    return "\n".join(out) + "\n"
