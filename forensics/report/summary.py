"""The first screen an engineer acts on: the report's summary as (label, text) lines.

Why its own module: report.json, report.md, report.html and the terminal all open with these
same lines, so they are worded once, here, from the model (`model.SpikeReport`); each renderer
only escapes them for its medium. In order: the spike, the verdict (CULPRIT and why, or NO
CULPRIT), the ACTION, the MODEL, how sure, ROLL BACK, SKIP or STOPGAP, AHEAD, and the PASTE line
for the run's trainer.
"""

from __future__ import annotations

import shlex
from typing import Any

import polars as pl

from forensics.report.action_view import action_lines, skip_label
from forensics.report.confidence import confidence_lines, no_culprit_lines
from forensics.report.model import (
    SpikeReport,
    cluster_name,
    corroborating_rows,
    format_p,
    format_value,
    pct,
)
from forensics.report.model_view import model_summary
from forensics.report.why_shares import blend_lines

FLAG_CHARS = 160  # a longer paste line is shown as $(cat restart-<trainer>.flags), never cut
NO_CULPRIT_ADVICE = (
    "no cluster stands out: the spike is then more likely numerical (a hard batch, a bf16 "
    "overflow, a hardware glitch). If it is benign, do nothing; if spikes keep coming and no "
    "dirty data is found, only then lower the learning rate or tighten gradient clipping."
)
Line = tuple[str, str]  # (label, raw text); "" continues the line above


def _ranges(iterations: list[list[int]] | list[tuple[int, int]]) -> tuple[str, int]:
    parts, total = [], 0
    for first, last in iterations:
        parts.append(f"{first}-{last}" if first != last else f"{first}")
        total += last - first + 1
    shown = ", ".join(parts[:6]) + (f", ... ({len(parts)} ranges)" if len(parts) > 6 else "")
    return shown, total


def _why(report: SpikeReport, top: dict[str, Any]) -> list[str]:
    lines = []
    name = "this cluster" if top["kind"] == "embedding" else f"this {top['facet']}"
    if top["new_in_window"]:
        seam = "new in the window (absent from the baseline): a mixture switch"
        if report.culprit_first_iteration is not None:
            seam += f"; its first document appears at iteration {report.culprit_first_iteration}"
        lines.append(seam)
    share = (
        f"{name} is {pct(top['window_share'])} of the window's documents, "
        f"{pct(top['baseline_share'])} of the baseline's ({format_p(top['p_value'])}"
    )
    share += ")" if top["new_in_window"] else f", {top['enrichment']:.1f}x)"
    lines.append(share)
    lines.extend(blend_lines(top, report.step, report.window))
    flagged = (
        f"{pct(top['flagged_rate'])} of its documents are flagged: garbage "
        f"{pct(top['garbage_rate'])}, spam {pct(top['spam_rate'])} (rest of the window: "
        f"{pct(top['rest_flagged_rate'])})"
    )
    lines.append(flagged)
    if top.get("top_reasons"):
        lines.append("top reasons: " + "; ".join(top["top_reasons"]))
    if top["kind"] == "embedding" and top.get("dominant_sources"):
        lines.append("it lives in: " + ", ".join(top["dominant_sources"]))
    if top.get("aliases"):
        lines.append("same documents as: " + ", ".join(top["aliases"][:4]))
    ranked = report.clusters
    corroborating = corroborating_clusters(ranked, top)
    if corroborating:
        named = "; ".join(corroborating[:3])
        more = f" ({len(corroborating)} in all)" if len(corroborating) > 3 else ""
        lines.append(f"embedding clusters mostly made of its documents: {named}{more}")
    others = ranked.filter(
        (pl.col("id") != top["id"])
        & pl.col("explained_by").is_null()
        & (pl.col("verdict") != "clean")
    )
    if others.height:
        nxt = others.row(0, named=True)
        lines.append(
            f"next most suspicious cluster: {cluster_name(nxt)}, "
            f"{pct(nxt['flagged_rate'])} flagged ({nxt['verdict']})"
        )
    else:
        lines.append("no other cluster is a suspect outside it")
    return lines


def corroborating_clusters(ranked: pl.DataFrame, top: dict[str, Any]) -> list[str]:
    """corroborating_rows in words, named with keywords (each has a drill-down section)."""
    return [
        f"{cluster_name(r)}, {r['in_culprit']} of its docs" for r in corroborating_rows(ranked, top)
    ]


def _dominant_dataset(top: dict[str, Any]) -> str | None:
    if top.get("facet") == "dataset":
        return None
    if top.get("main_dataset"):
        return str(top["main_dataset"])
    for alias in top.get("aliases") or []:
        if alias.startswith("dataset="):
            return alias.split("=", 1)[1]
    for source in top.get("dominant_sources") or []:
        if source.startswith("dataset="):
            return source.split("=", 1)[1]
    return None


def _verdict_lines(report: SpikeReport) -> list[Line]:
    """CULPRIT and why; or NO CULPRIT (dirty data in the window is not cleared) and the most
    suspicious cluster, if any."""
    top = report.culprit
    if top is not None:
        dataset = _dominant_dataset(top)
        out = [("CULPRIT", cluster_name(top) + (f" (dataset {dataset})" if dataset else ""))]
        return out + [("why" if i == 0 else "", line) for i, line in enumerate(_why(report, top))]
    out = list(no_culprit_lines(report, NO_CULPRIT_ADVICE))
    suspects = report.clusters.filter(pl.col("verdict") == "suspect")
    if suspects.height:
        s = suspects.row(0, named=True)
        out.append(
            (
                "",
                f"most suspicious: {cluster_name(s)} (suspect: {pct(s['flagged_rate'])} "
                f"flagged, {pct(s['window_share'])} of the window, "
                f"{pct(s['baseline_share'])} of the baseline)",
            )
        )
        out.extend(("", line) for line in blend_lines(s, report.step, report.window))
    return out


def _rollback_lines(report: SpikeReport) -> list[Line]:
    if report.rollback_iteration is None:
        return []
    text = f"to iteration {report.rollback_iteration}"
    text += f" ({report.step - report.rollback_iteration} iterations before the spike)"
    if report.rollback_note:
        text += f"; {report.rollback_note}"
    return [("ROLL BACK", text)]


def _skip_lines(skip: dict[str, Any]) -> list[Line]:
    """SKIP (or STOPGAP): the iterations, what skipping them costs, the block list; AHEAD: what
    the rest of the run still holds of the culprit."""
    out: list[Line] = []
    if skip.get("iterations"):
        shown, total = _ranges(skip["iterations"])
        text = f"iterations {shown} ({total} iterations)"
        coll = skip.get("collateral") or {}
        if coll:
            text += "; " + ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in coll.items())
        if skip.get("documents") is not None:
            text += f"; block list: {int(skip['documents']):,} documents"
        out.append((skip_label(skip), text))
    if skip.get("ahead"):
        ahead = skip["ahead"]
        text = (
            "; ".join(f"{k.replace('_', ' ')}: {format_value(v)}" for k, v in ahead.items())
            if isinstance(ahead, dict)
            else str(ahead)
        )
        out.append(("AHEAD", text))
    return out


def _paste_lines(skip: dict[str, Any]) -> list[Line]:
    """PASTE: the run's trainer's flag (or where the whole line is, when it is long), or NO FLAG
    with why; then where the other trainers' flags are."""
    flags = skip.get("flags") or {}
    chosen = flags.get(skip.get("trainer"), {})
    if not (skip.get("iterations") and chosen):
        return []
    out: list[Line] = []
    if chosen.get("flag"):
        pin = chosen.get("pin") or ""
        paste = f"{pin} {chosen['flag']}" if pin.startswith("--") else str(chosen["flag"])
        if len(paste) <= FLAG_CHARS:
            out.append(("PASTE", f"{skip['trainer']}: {paste}"))
        else:  # never a cut line: the whole one is in a file beside the report
            where = (skip.get("action") or {}).get("flags_dir")
            path = shlex.quote(f"{where}/" * bool(where) + f"restart-{skip['trainer']}.flags")
            out.append(("PASTE", f"{skip['trainer']}: $(cat {path})"))
            whole = f"{len(paste):,} characters"
            out.append(("", f"(the file beside this report holds the whole line, {whole})"))
        if pin and not pin.startswith("--"):
            out.append(("", f"load the rollback checkpoint: {pin}"))
        out.append(("", f"({chosen.get('semantics', '')}; then {chosen.get('consequence')})"))
        if skip.get("tracker_file"):
            out.append(("", f"or --result-rejected-tracker-filename {skip['tracker_file']}"))
    else:
        out.append(("NO FLAG", f"{skip['trainer']}: {chosen.get('refusal')}"))
    others = [n for n, f in flags.items() if n != skip.get("trainer") and f.get("flag")]
    if others:
        out.append(("", "other trainers' flags: megatron_args.txt (" + ", ".join(others) + ")"))
    return out


def summary_lines(report: SpikeReport) -> list[Line]:
    """The first screen as (label, text) lines, raw text; renderers escape it for their medium."""
    first, last = report.window
    b0, b1 = report.baseline
    skip = report.skip or {}
    return [
        ("", f"Spike at iteration {report.step}, window {first}-{last}, baseline {b0}-{b1}"),
        *_verdict_lines(report),
        *action_lines(skip, report.rollback_iteration),  # rebuild or skip leads
        *model_summary(report),
        *confidence_lines(report),  # how sure: data, model, loss explained
        *_rollback_lines(report),
        *_skip_lines(skip),
        *_paste_lines(skip),
    ]
