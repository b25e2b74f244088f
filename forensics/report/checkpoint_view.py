"""The report's "what the model choked on" section (report.model), for every renderer.

report.model is plain data from forensics.rescore.verdict.model_view; document text in it (the
peak-loss spans) is raw, so each renderer here escapes it for its medium. When no checkpoint was
given the section says so plainly: the verdict then rests on the data side alone.
"""

from __future__ import annotations

import html
import math
from typing import Any

from forensics.report.control_view import unchecked_lines
from forensics.safe_text import html_safe, md_code, md_safe

NO_MODEL = (
    "no checkpoint given: the verdict rests on the data side alone (what was unusual, not what "
    "the model choked on); rerun with --checkpoint DIR (the pre-spike checkpoint in Hugging Face "
    "format) or --losses FILE"
)
PEAK_MARK = ("\u27e6", "\u27e7")  # the peak token is shown between these brackets


def _z(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{value:+.2f}"


def model_summary(report: Any) -> list[tuple[str, str]]:
    """The first screen's MODEL line(s)."""
    view = report.model
    if not view:
        return [("MODEL", NO_MODEL), *unchecked_lines(report)]
    scored = (
        f"{view['window_samples']:,} of {view['window_samples_total']:,} window samples and "
        f"{view['baseline_samples']:,} baseline samples scored ({view['level']} losses, "
        f"{view['source']})"
    )
    out = [("MODEL", view["agreement"]), ("", scored)]
    named = view.get("named") or {}
    others = [c for c in view.get("clusters") or [] if c["id"] in named]
    if others and not view["agreement"].startswith("the model, not a scorer"):
        names = ", ".join(f"{c['name']} (loss z {_z(c['loss_z'])})" for c in others[:3])
        out.append(("", f"named by the model, not a scorer: {names}"))
    return out


def span_text(span: dict[str, str] | None) -> str:
    """before ⟦peak⟧ after, raw (callers escape)."""
    if not span:
        return ""
    left, right = PEAK_MARK
    return f"{span['before']}{left}{span['peak']}{right}{span['after']}"


def _rows(view: dict[str, Any]) -> list[list[str]]:
    return [
        [c["id"], c["name"], c["combined"], _z(c["loss_z"]), _z(c["max_token_z"]),
         _z(c["grad_norm_z"]), str(c["units"]), c["evidence"]]
        for c in view["clusters"][:20]
    ]  # fmt: skip


CLUSTER_HEAD = ["id", "cluster", "verdict", "loss z", "worst-token z", "grad-norm z",
                "scored segments", "model"]  # fmt: skip
SAMPLE_HEAD = ["iteration", "position", "loss", "loss z", "worst-token z", "grad-norm z",
               "documents"]  # fmt: skip


def markdown_section(view: dict[str, Any] | None) -> str:
    """What the model choked on, under its heading (Markdown; text escaped with md_safe)."""
    if not view:
        return f"{md_safe(NO_MODEL, 600)}.\n"
    parts = [f"{md_safe(view['agreement'], 600)}\n"]
    parts.append("| " + " | ".join(CLUSTER_HEAD) + " |\n|" + "---|" * len(CLUSTER_HEAD))
    for row in _rows(view):
        parts.append("| " + " | ".join(md_safe(x, 120) for x in row) + " |")
    parts.append("\nTop samples by loss z:\n")
    parts.append("| " + " | ".join(SAMPLE_HEAD) + " |\n|" + "---|" * len(SAMPLE_HEAD))
    for s in view["top_samples"]:
        docs = ", ".join(s.get("documents") or [])
        cells = [str(s["iteration"]), str(s["position"]), f"{s['loss']:.3f}", _z(s["loss_z"]),
                 _z(s["max_token_z"]), _z(s["grad_norm_z"]), md_safe(docs, 160)]  # fmt: skip
        parts.append("| " + " | ".join(cells) + " |")
    if view["top_documents"]:
        parts.append("\nTop documents by segment loss z (the peak-loss token in \u27e6 \u27e7):\n")
        for d in view["top_documents"]:
            parts.append(
                f"- {md_code(d['dataset'], 60)} doc {d['doc_id']} (iteration {d['iteration']}, "
                f"position {d['position']}): loss z {_z(d['loss_z'])}, worst-token z "
                f"{_z(d['max_token_z'])}: {md_safe(span_text(d.get('span')), 400)}"
            )
    return "\n".join(parts) + "\n"


def html_section(view: dict[str, Any] | None) -> str:
    """What the model choked on, under its heading (HTML; document text through html_safe)."""
    if not view:
        return f"<p>{html.escape(NO_MODEL)}.</p>"
    head = "".join(f"<th>{html.escape(h)}</th>" for h in CLUSTER_HEAD)
    body = "".join(
        "<tr>" + "".join(f"<td>{html_safe(x, 160)}</td>" for x in row) + "</tr>"
        for row in _rows(view)
    )
    parts = [
        f"<p>{html_safe(view['agreement'], 600)}</p>",
        f"<table><tr>{head}</tr>{body}</table>",
    ]
    if view["top_documents"]:
        parts.append("<h3>Top documents by segment loss z (peak-loss token marked)</h3>")
        for d in view["top_documents"]:
            span = d.get("span") or {}
            text = (
                html_safe(span.get("before", ""), 400)
                + '<b style="background:#fde8e8">'
                + html_safe(span.get("peak", ""), 40)
                + "</b>"
                + html_safe(span.get("after", ""), 200)
            )
            parts.append(
                f'<div class="muted">{html_safe(d["dataset"], 80)} doc {int(d["doc_id"])}, '
                f"iteration {int(d['iteration'])}: loss z {_z(d['loss_z'])}, worst-token z "
                f'{_z(d["max_token_z"])}</div><div class="ex">{text}</div>'
            )
    return "".join(parts)
