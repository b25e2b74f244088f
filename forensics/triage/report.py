"""Write what the triage found: events.json, summary.json, report.md, triage.png, and a terminal
summary. Formatting only; every number comes from `analyze.TriageResult`.

All files are written atomically (a reader never sees half a report). Names that come from the
log (per-domain curve names, the log path) go through `safe_text` before reaching the terminal
or the Markdown.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
from rich.markup import escape

from dataloaders.atomic import write_bytes_atomic, write_json_atomic, write_text_atomic
from forensics.outputs import publish
from forensics.safe_text import excerpt, terminal_safe
from forensics.triage.analyze import TriageResult
from forensics.triage.plot import event_counts, render_png

PNG_NAME = "triage.png"
OUTPUT_NAMES = ("events.json", "summary.json", PNG_NAME, "report.md")
STATE_DIR = ".triage"  # the lock and the staging folder, inside the output directory


def write_outputs(result: TriageResult, out: Path, source: str, fmt: str) -> list[Path]:
    """Write the four output files into `out`; return their paths.

    Everything is rendered in memory, written into `out/.triage/staging` and moved into place
    as one step (forensics.outputs.publish), so a full disk or a signal leaves the old set or
    the new one, never a mix."""
    summary = json_safe({"source": source, "format": fmt, **result.summary})
    events = json_safe(result.events)
    png = render_png(result)
    markdown = render_markdown(result, source, fmt)
    staging = out / STATE_DIR / "staging"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        write_json_atomic(staging / "events.json", events)
        write_json_atomic(staging / "summary.json", summary)
        write_bytes_atomic(staging / PNG_NAME, png)
        write_text_atomic(staging / "report.md", markdown)
    except BaseException:  # a full disk: nothing of this run stays behind
        shutil.rmtree(staging, ignore_errors=True)
        raise
    published = {p.name: p for p in publish(staging, out, OUTPUT_NAMES)}
    return [published[name] for name in OUTPUT_NAMES]


def json_safe(obj: Any) -> Any:
    """NaN and infinities become null (JSON has no NaN); numpy scalars become Python numbers."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj


# --------------------------------------------------------------------------- markdown


def _md_event(e: dict[str, Any]) -> list[str]:
    kind, step = e["kind"], e["step"]
    curve = f" on `{excerpt(e['curve'], 60)}`" if e.get("curve", "loss") != "loss" else ""
    ev = e.get("evidence", {})
    lines: list[str] = []
    if kind == "spike":
        lines.append(f"### Spike at iteration {step}{curve}: **{e['verdict']}**")
        lines.append(
            f"- peak {ev['peak_loss']:.4g} at {e['peak_step']} over a pre-spike level "
            f"{ev['pre_spike_level']:.4g} (robust z {ev['robust_z']:.1f})"
        )
        lines.append(f"- {ev['summary']}")
        if ev.get("recovery_meaning"):
            lines.append(f"- {ev['recovery_meaning']}")
        if ev.get("preceded_by"):
            lines.append(f"- preceded by: {', '.join(ev['preceded_by'])}")
        lines += _md_plan(e)
    elif kind == "divergence":
        lines.append(f"### Divergence from iteration {step}{curve}")
        lines.append(f"- {ev['summary']}")
        lines.append(f"- grad norm before it: {ev['grad_norm_before']}")
        lines += _md_plan(e)
    elif kind == "plateau":
        lines.append(f"### Plateau, iterations {step}-{e['end_step']}{curve}")
        lines.append(f"- {ev['summary']}")
        for c in e["checks"]:
            said = c.get("evidence") or f"not checked: needs {c.get('needed')}"
            lines.append(f"- {c['check']}: {c.get('result') or 'unknown'} ({said})")
        lines.append(f"- **conclusion**: {e['conclusion']}")
    elif kind == "recurring_spikes":
        lines.append(f"### Recurring spikes from iteration {step}{curve}: run-level finding")
        lines.append(f"- {e['finding']}")
    elif kind == "slow_climb":
        lines.append(f"### Slow climb, iterations {step}-{e['end_step']}{curve}: **watch**")
        lines.append(f"- {ev['summary']}")
        lines.append(f"- **action**: {e['action']}")
    else:
        title = "Grad-norm alarm" if kind == "grad_norm_alarm" else "fp16 loss-scale collapse"
        if e.get("mode") == "sustained":
            title = "Grad-norm alarm (sustained rise)"
        lines.append(f"### {title} at iteration {step}")
        lines.append(f"- {ev['summary']}")
        if e.get("loss_onset_step") is not None:
            if e["loss_onset_step"] == e["loss_peak_step"]:
                lines.append(
                    f"- loss event at {e['loss_onset_step']}: {_lead(e['led_loss_onset_by'])}"
                )
            else:
                lines.append(
                    f"- loss event onset {e['loss_onset_step']}: {_lead(e['led_loss_onset_by'])}; "
                    f"its peak {e['loss_peak_step']}: {_lead(e['led_loss_peak_by'])}"
                )
        else:
            lines.append(f"- {ev.get('loss_response', '')}")
    return lines + [""]


def _md_plan(e: dict[str, Any]) -> list[str]:
    """The plan of an event that has not come back: rollback, spike command, what decides it,
    the causes ranked from the evidence. Nothing for a benign spike."""
    if "rollback_iteration" not in e:
        return []
    ev = e["evidence"]
    lines = [
        f"- **roll back to iteration {e['rollback_iteration']}** ({ev['rollback']})",
        f"- next: `{e['next_command']}`",
    ]
    if ev.get("next_command_note"):
        lines.append(f"  ({ev['next_command_note']})")
    if e.get("decide"):
        lines.append(f"- {e['decide']['rule']}")
    if e.get("action"):
        lines.append(f"- **action**: {e['action']}")
    if e.get("likely_causes"):
        lines.append("- likely causes, ranked from the evidence:")
        for i, c in enumerate(e["likely_causes"], 1):
            mark = {True: "supported", False: "not supported", None: "cannot tell"}[c["supported"]]
            lines.append(f"  {i}. {c['cause']} ({mark}): {c['evidence']}")
    return lines


def _lead(steps: int) -> str:
    if steps > 0:
        return f"the alarm came {steps} step(s) before it"
    if steps == 0:
        return "the alarm came at the same step"
    return f"the alarm came {-steps} step(s) after it"


def render_markdown(result: TriageResult, source: str, fmt: str) -> str:
    s = result.summary
    out = [
        "# Loss-curve triage",
        "",
        f"Log: `{excerpt(source, 200)}` ({fmt}), {s['rows']} rows, iterations "
        f"{s['first_step']}-{s['last_step']}.",
        "",
        f"**Status: {s['status']}** ({event_counts(result)}).",
        "",
        f"![loss, grad norm, lr]({PNG_NAME})",
        "",
        "## Events",
        "",
    ]
    shown = [e for e in result.events if e["kind"] != "spike" or e["verdict"] != "benign"]
    benign = [e for e in result.events if e["kind"] == "spike" and e["verdict"] == "benign"]
    if not result.events:
        out += ["No spikes, alarms, divergence or plateaus.", ""]
    for e in shown:
        out += _md_event(e)
    if benign:
        out += [f"### {len(benign)} benign spikes", ""]
        out += [
            f"- iteration {e['step']} (peak {e['peak_step']}): back in {e['recovery_steps']} "
            f"steps ({e['recovery_speed']})"
            for e in benign[:50]
        ]
        out += [""]
    out += ["## Curves", ""]
    for name, c in s["curves"].items():
        out.append(f"### `{excerpt(name, 60)}`")
        out.append(
            f"- {c['points']} finite points, iterations {c['first_step']}-{c['last_step']}; last "
            f"loss {c['last_loss']:.4g}, EMA {c['last_ema']:.4g}"
            if c["points"]
            else "- no finite points"
        )
        pl_ = c["power_law"]
        if pl_:
            narrows = {True: "narrows", False: "does not narrow", None: "cannot tell"}[
                pl_["noise_narrows"]
            ]
            out.append(
                f"- power law from iteration {pl_['from_step']}: loss ~ step^{pl_['exponent']:.3f} "
                f"(r2 {pl_['r2']:.2f}); short-term noise {pl_['noise_early']:.3g} -> "
                f"{pl_['noise_late']:.3g} ({narrows} as the loss falls)"
            )
        out.append(
            f"- {c['blips']} one-step blips counted (not alarmed on); spikes: "
            + ", ".join(f"{v} {k}" for k, v in c["spikes"].items())
        )
        if c["non_finite_steps"]:
            out.append(
                f"- loss not finite or missing at {c['non_finite_steps']} logged rows, first at "
                f"iteration {c['first_non_finite_step']} (a divergence only when something "
                "preceded it; otherwise the log simply stops reporting)"
            )
        out.append("")
    return "\n".join(out)


# --------------------------------------------------------------------------- terminal


def terminal_lines(result: TriageResult) -> list[str]:
    """A short rich-markup summary: status, then one line per event worth attention."""
    s = result.summary
    color = {"healthy": "green", "watch": "yellow", "act": "bold red"}[s["status"]]
    lines = [f"[{color}]{s['status'].upper()}[/]  {terminal_safe(event_counts(result), 200)}"]
    for name, c in s["curves"].items():
        fit = c["power_law"]
        lines.append(
            f"  {terminal_safe(name, 40)}: {c['points']} points, last {c['last_loss']:.4g}"
            + (f", power law exp {fit['exponent']:.3f} (r2 {fit['r2']:.2f})" if fit else "")
            + f", {c['blips']} blips counted"
            if c["points"]
            else f"  {terminal_safe(name, 40)}: no finite points"
        )
    for e in result.events:
        if e["kind"] == "spike" and e["verdict"] == "benign":
            continue
        lines += _terminal_event(e)
    n_benign = sum(1 for e in result.events if e["kind"] == "spike" and e["verdict"] == "benign")
    if n_benign:
        lines.append(f"  {n_benign} benign spikes (see report.md)")
    return lines


def _terminal_event(e: dict[str, Any]) -> list[str]:
    """One event: its kind, curve and step, its evidence; the top cause and the action."""
    summary = terminal_safe(e.get("evidence", {}).get("summary", ""), 160)
    curves = e.get("curves") or ([e["curve"]] if e.get("curve") else [])
    named = terminal_safe(", ".join(curves), 80)
    where = f" on {named}" if curves and curves != ["loss"] else ""
    if e.get("scope") == "one domain":
        named = terminal_safe(e["curve"], 60)
        where = f" on {named} alone (the other domains held)"
    elif e.get("scope") == "all domains":
        where = f" on every domain at once ({named})"
    head = f"  {e['kind']}{where} @ {e['step']}"
    if e["kind"] == "spike":
        tcolor = {"benign": "green", "malignant": "red", "undecided": "yellow"}[e["verdict"]]
        head += f" [{tcolor}]{e['verdict']}[/]"
    lines = [f"{head}: {summary}"]
    if e["kind"] == "plateau":
        lines.append(f"    -> {terminal_safe(e['conclusion'], 200)}")
    if e.get("finding"):
        lines.append(f"    -> {terminal_safe(e['finding'], 300)}")
    causes = e.get("likely_causes") or []
    if causes:
        top = causes[0]
        mark = {True: "supported", False: "ruled out", None: "cannot tell"}[top["supported"]]
        lines.append(
            f"    -> {named}: top cause {terminal_safe(top['cause'], 120)} ({mark}): "
            f"{terminal_safe(top['evidence'], 300)}"
        )
    if e["kind"] == "divergence":
        lines.append(f"    [bold red]{escape(terminal_safe(e['action'], 400))}[/]")
    elif e.get("next_command"):
        command = escape(e["next_command"])
        lines.append(f"    roll back to {e['rollback_iteration']}; next: {command}")
    if e.get("decide"):
        lines.append(f"    {terminal_safe(e['decide']['rule'], 300)}")
    if e.get("led_loss_onset_by") is not None:
        lines.append(f"    led the loss onset by {e['led_loss_onset_by']} steps")
    return lines
