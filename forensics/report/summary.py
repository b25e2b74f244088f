"""The first screen's reasons, as (label, text) lines: why the culprit is blamed (or why none
is), how sure, what the model said, the rollback, the skipped iterations, the block list, what
lies ahead, the cluster counts and what the chosen trainer's flags do.

Why its own module: report.json, report.md, report.html and the terminal show these same lines
in the same order (forensics.report.first_screen puts the headline and the commands above
them), worded once, here, from the model (`model.SpikeReport`) before any rendering; each
renderer only escapes them for its medium.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from forensics.cluster.sample import evidence_text
from forensics.cluster.verdict import dirty_against
from forensics.report.checkpoint_view import model_summary, span_text
from forensics.report.confidence import confidence_lines, no_culprit_lines
from forensics.report.contents import (
    SpikeReport,
    cluster_name,
    corroborating_rows,
    format_p,
)
from forensics.report.numbers import pct
from forensics.report.skip_view import ReportSkip
from forensics.report.why_shares import blend_lines

NO_CULPRIT_ADVICE = (
    "no cluster stands out: the spike is then more likely numerical (a hard batch, a bf16 "
    "overflow, a hardware glitch). If it is benign, do nothing; if spikes keep coming and no "
    "dirty data is found, only then lower the learning rate or tighten gradient clipping."
)
Line = tuple[str, str]  # (label, raw text); "" continues the line above


def ranges_text(iterations: list[list[int]]) -> tuple[str, int]:
    """ "151-167, 169-170" (six ranges at most, then a count) and the number of iterations."""
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
        seam = "new in the window (absent from the baseline)"
        seam += ": a mixture switch" if report.switch_before_spike else ""
        if report.culprit_first_iteration is not None:
            seam += f"; its first document appears at iteration {report.culprit_first_iteration}"
        lines.append(seam)
    share = (
        f"{name} is {pct(top['window_share'])} of the window's documents, "
        f"{pct(top['baseline_share'])} of the baseline's ({format_p(top['p_value'])}"
    )
    share += ")" if top["new_in_window"] else f", {top['enrichment']:.1f}x)"
    lines.append(share)
    lines.extend(blend_lines(top, report.step, report.window, report.stage_starts))
    lines.extend(model_named_lines(report, top))
    flagged = (
        f"{pct(top['flagged_rate'])} of its documents are flagged: garbage "
        f"{pct(top['garbage_rate'])}, spam {pct(top['spam_rate'])} (rest of the window: "
        f"{pct(top['rest_flagged_rate'])}"
    )
    if dirty_against(top) == "the baseline":  # the burst fills the window's rest too
        flagged += f"; baseline: {pct(top['baseline_flagged_rate'])}"
    flagged += f"; {evidence_text(top)})"
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
        named = ", named by the model" if nxt.get("named_by") == "model" else ""
        lines.append(
            f"next most suspicious cluster: {cluster_name(nxt)}, "
            f"{pct(nxt['flagged_rate'])} flagged ({nxt['verdict']}{named})"
        )
    else:
        lines.append("no other cluster is a suspect outside it")
    return lines


def model_named_lines(report: SpikeReport, top: dict[str, Any], shown: int = 3) -> list[str]:
    """For a culprit the model named: that the model, not a scorer, named it, its evidence, and
    its highest-loss documents (text raw; renderers escape it)."""
    if top.get("named_by") != "model":
        return []

    versus = "its own baseline documents" if top.get("model_reference") == "own" else "the baseline"
    lines = [
        f"named by the model, not a scorer: its documents' loss under the checkpoint is "
        f"{top['model_effect']:+.2f} baseline sds above {versus}'s (Holm-corrected "
        f"{format_p(top['model_holm_p'])})"
    ]
    docs = ((report.model or {}).get("named") or {}).get(top["id"]) or []
    for d in docs[:shown]:
        span = span_text(d.get("span"))[:120]
        lines.append(
            f"highest loss: {d['dataset']} doc {d['doc_id']} (loss z {d['loss_z']:+.1f}, "
            f"iteration {d['iteration']})" + (f": {span!r}" if span else "")
        )
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
        out.extend(
            ("", line) for line in blend_lines(s, report.step, report.window, report.stage_starts)
        )
    return out


def rollback_lines(report: SpikeReport) -> list[Line]:
    """ROLL BACK: the checkpoint and the rule that chose it."""
    if report.rollback_iteration is None:
        return []
    text = f"to iteration {report.rollback_iteration}"
    text += f" ({report.step - report.rollback_iteration} iterations before the spike)"
    if report.rollback_note:
        text += f"; {report.rollback_note}"
    return [("ROLL BACK", text)]


def skip_lines(skip: ReportSkip) -> list[Line]:
    """SKIP (when skipping is the fix; under a rebuild the stopgap names them): the iterations
    and what skipping them costs; BLOCK LIST: its size, said once; AHEAD: the culprit in the
    rest of the run."""
    out: list[Line] = []
    if skip.iterations and not skip.action.removes:
        shown, total = ranges_text(skip.iterations)
        text = f"iterations {shown} ({total} iterations)"
        if skip.collateral:
            text += "; " + ", ".join(
                f"{k.replace('_', ' ')} {v:,}" for k, v in skip.collateral.items()
            )
        out.append(("SKIP", text))
    if skip.documents:
        out.append(("BLOCK LIST", block_list_text(skip)))
    if skip.ahead and skip.documents:  # with no culprit there is nothing to look ahead for
        out.append(("AHEAD", skip.ahead))
    return out


def block_list_text(skip: ReportSkip) -> str:
    """ "30 documents (19 drawn in the window + 11 more of the culprit's, not drawn in it) in
    skip.json": the block list's size, said once."""
    text = f"{skip.documents:,} documents"
    seen = skip.seen_in_window
    if seen is not None and skip.documents is not None and seen <= skip.documents:
        text += (
            f" ({seen:,} drawn in the window + {skip.documents - seen:,} more of the culprit's, "
            "not drawn in it)"
        )
    return text + " in skip.json"


def cluster_counts(clusters: pl.DataFrame) -> dict[str, int]:
    """The counts every medium prints: culprits, suspects on their own, suspects inside a
    culprit, clean clusters (inside a culprit or not), and all of them."""
    if clusters.height == 0:
        return {"culprit": 0, "suspect": 0, "suspect_inside_culprit": 0, "clean": 0, "all": 0}
    inside = pl.col("explained_by").is_not_null()
    v = pl.col("verdict")
    return {
        "culprit": clusters.filter(v == "culprit").height,
        "suspect": clusters.filter((v == "suspect") & ~inside).height,
        "suspect_inside_culprit": clusters.filter((v == "suspect") & inside).height,
        "clean": clusters.filter(v == "clean").height,
        "all": clusters.height,
    }


def counts_text(counts: dict[str, int]) -> str:
    """ "1 culprit, 0 suspects (+4 inside a culprit), 55 clean; 60 clusters"."""

    def n(count: int, word: str) -> str:
        return f"{count} {word}" + ("s" if count != 1 else "")

    text = f"{n(counts['culprit'], 'culprit')}, {n(counts['suspect'], 'suspect')}"
    if counts["suspect_inside_culprit"]:
        text += f" (+{counts['suspect_inside_culprit']} inside a culprit)"
    return text + f", {counts['clean']} clean; {counts['all']} clusters"


def flag_lines(skip: ReportSkip) -> list[Line]:
    """FLAGS: what the chosen trainer's flag does and costs, or NO FLAG with why; then where
    the other trainers' flags are."""
    chosen = skip.chosen
    if not (skip.iterations and chosen is not None):
        return []
    out: list[Line] = []
    if chosen.flag:
        out.append(("FLAGS", f"{skip.trainer}: {chosen.semantics}; then {chosen.consequence}"))
        if skip.tracker_file:
            out.append(("", f"or --result-rejected-tracker-filename {skip.tracker_file}"))
    else:
        out.append(("NO FLAG", f"{skip.trainer}: {chosen.refusal}"))
    others = [n for n, f in skip.flags.items() if n != skip.trainer and f.flag]
    if others:
        out.append(("", "other trainers' flags: megatron_args.txt (" + ", ".join(others) + ")"))
    return out


def figures_lines(ranked: pl.DataFrame) -> list[Line]:
    """Where the documents were sampled (forensics.spike.passes): which figures are exact and
    which are estimates. Nothing where every document was scored (every figure is exact)."""
    if "scored_docs" not in ranked.columns:
        return []
    sources = ranked.filter(pl.col("kind") == "source")
    estimated = sources.filter(pl.col("scored_docs") < pl.col("docs")).height
    return [
        (
            "FIGURES",
            f"all exact except the flagged rates of {estimated:,} groups and of the window's "
            "rest, and the embedding clusters: estimates from a seeded sample (95% intervals "
            f"in the cluster table; {sources.height - estimated:,} groups scored whole)",
        )
    ]


def reason_lines(report: SpikeReport) -> list[Line]:
    """The reasons under the commands, in every medium's order."""
    skip = report.skip
    first, last = report.window
    b0, b1 = report.baseline
    return [
        *_verdict_lines(report),
        *confidence_lines(report),  # how sure: data, model, loss explained
        *rollback_lines(report),
        *(skip_lines(skip) if skip is not None else []),
        ("CLUSTERS", counts_text(cluster_counts(report.clusters))),
        *figures_lines(report.clusters),
        *model_summary(report),
        ("WINDOW", f"iterations {first}-{last} replayed, baseline {b0}-{b1}"),
        *(flag_lines(skip) if skip is not None else []),
    ]
