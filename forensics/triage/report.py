"""Write what the triage found: events.json, summary.json, report.md, triage.png, and a terminal
summary. Formatting only; every number comes from `analyze.TriageResult`.

All files are written atomically (a reader never sees half a report). Names that come from the
log (per-domain curve names, the log path) go through `safe_text` before reaching the terminal
or the Markdown.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Any

import numpy as np
from rich.markup import escape

from dataloaders.atomic import write_bytes_atomic, write_json_atomic, write_text_atomic
from forensics.safe_text import excerpt, terminal_safe
from forensics.triage.analyze import TriageResult

PNG_NAME = "triage.png"
OUTPUT_NAMES = ("events.json", "summary.json", PNG_NAME, "report.md")
STATE_DIR = ".triage"  # the lock and the staging folder, inside the output directory
_MAX_PLOT_POINTS = 4000
_VERDICT_COLOR = {"benign": "tab:green", "malignant": "tab:red", "undecided": "tab:orange"}


def write_outputs(result: TriageResult, out: Path, source: str, fmt: str) -> list[Path]:
    """Write the four output files into `out`; return their paths.

    Everything is rendered in memory, written into `out/.triage/staging` and moved into place
    as one step (forensics.outputs.publish), so a full disk or a signal leaves the old set or
    the new one, never a mix."""
    from forensics.outputs import publish

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


# --------------------------------------------------------------------------- plot


def decimate(x: np.ndarray, y: np.ndarray, max_points: int = _MAX_PLOT_POINTS) -> tuple[Any, Any]:
    """Keep each bin's min and max so a million-point curve plots fast and keeps its spikes."""
    n = len(x)
    if n <= max_points:
        return x, y
    bins = max_points // 2
    edges = np.linspace(0, n, bins + 1).astype(int)
    keep = []
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        if b > a:
            seg = y[a:b]
            keep += [a + int(np.nanargmin(seg)), a + int(np.nanargmax(seg))]
    idx = np.unique(np.array(keep))
    return x[idx], y[idx]


def broken_at_gaps(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Insert a NaN where the log skips far more steps than usual, so the plot does not draw a
    straight line through iterations nobody logged."""
    if len(x) < 3:
        return x.astype(float), y.astype(float)
    d = np.diff(x)
    cut = np.flatnonzero(d > 5 * max(float(np.median(d)), 1.0)) + 1
    return np.insert(x.astype(float), cut, np.nan), np.insert(y.astype(float), cut, np.nan)


def _line(ax: Any, x: np.ndarray, y: np.ndarray, **kw: Any) -> None:
    """Plot a series: decimated when long, broken at gaps, with markers when sparse."""
    xs, ys = decimate(x, y)
    if len(xs) <= 120:
        kw.setdefault("marker", "o")
        kw.setdefault("markersize", 3)
        kw["alpha"] = max(kw.get("alpha", 1.0), 0.8)
    ax.plot(*broken_at_gaps(xs, ys), **kw)


def _has(result: TriageResult, col: str) -> bool:
    t = result.table
    return col in t.columns and t[col].drop_nulls().len() > 0


def render_png(result: TriageResult) -> bytes:
    """Loss with EMA, power law and events; grad norm with alarms; lr and loss scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    has_grad = _has(result, "grad_norm")
    has_lr = _has(result, "lr") or _has(result, "loss_scale")
    panels = 1 + has_grad + has_lr
    fig, axes = plt.subplots(
        panels,
        1,
        figsize=(11, 3.2 + 2.2 * (panels - 1)),
        sharex=True,
        squeeze=False,
        gridspec_kw={"height_ratios": [3] + [1.4] * (panels - 1)},
    )
    _plot_loss(axes[0][0], result)
    row = 1
    if has_grad:
        _plot_grad_norm(axes[row][0], result)
        row += 1
    if has_lr:
        _plot_lr_and_loss_scale(axes[row][0], result)
    axes[-1][0].set_xlabel("iteration")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def plot_label(name: str, max_chars: int = 40) -> str:
    """A curve name as matplotlib shows it literally: `$` would start mathtext (an unpaired one
    crashes the draw, a pair renders as math), so it is escaped."""
    return excerpt(name, max_chars).replace("$", r"\$")


def _plot_loss(ax: Any, result: TriageResult) -> None:
    """The loss panel: every curve, and the main curve's EMA, fit and events."""
    for k, (name, c) in enumerate(result.curves.items()):
        if len(c.steps) == 0:
            continue
        main = k == 0
        _line(
            ax,
            c.steps,
            c.loss,
            lw=0.6,
            alpha=0.45 if main else 0.35,
            color="tab:blue" if main else None,
            label=plot_label(name),
        )
        if main:
            _mark_main_curve(ax, c)
    _set_loss_ylim(ax, result)
    ax.set_ylabel("loss")
    # "best" placement costs seconds on dense plots; sparse plots are where it matters.
    sparse = sum(len(c.steps) for c in result.curves.values()) <= 2000
    ax.legend(loc="best" if sparse else "upper right", fontsize=8, framealpha=0.7)
    title = plot_label(f"triage: {result.summary['status']}  ({_event_counts(result)})", 200)
    ax.set_title(title, fontsize=10)


def _mark_main_curve(ax: Any, c: Any) -> None:
    """EMA, power-law fit, spikes, nan/missing steps, blips, divergence and plateaus."""
    _line(ax, c.steps, c.ema, lw=1.6, color="navy", label="EMA", marker=None)
    if c.fit is not None:
        fs = c.steps[c.steps >= c.fit.from_step]
        ax.plot(
            fs,
            c.fit.predict(fs),
            "--",
            lw=1,
            color="gray",
            label=f"power law (exp {c.fit.exponent:.3f})",
        )
    for s in c.spikes:
        if s.blip:
            continue
        color = _VERDICT_COLOR[s.verdict]
        ax.scatter([s.peak_step], [s.peak_loss], marker="v", s=50, color=color, zorder=5)
        if s.verdict != "benign":  # benign ones need no line across the plot
            ax.axvline(s.onset_step, color=color, lw=0.8, alpha=0.6)
    if len(c.bad_steps):
        ax.scatter(
            c.bad_steps[:2000],
            np.full(min(len(c.bad_steps), 2000), 1.0),
            transform=ax.get_xaxis_transform(),
            marker="x",
            color="tab:red",
            s=30,
            zorder=6,
            label="loss nan / missing",
            clip_on=False,
        )
    blips = c.blips
    if blips:
        ax.scatter(
            [b.peak_step for b in blips],
            [b.peak_loss for b in blips],
            marker=".",
            s=12,
            color="tab:gray",
            zorder=4,
            label=f"{len(blips)} one-step blips",
        )
    if c.divergence is not None:
        ax.axvspan(
            c.divergence.step,
            c.divergence.end_step,
            color="tab:red",
            alpha=0.12,
            label="divergence",
        )
    for p in c.plateaus:
        ax.axvspan(p.step, p.end_step, color="tab:gray", alpha=0.15)


def _plot_grad_norm(gx: Any, result: TriageResult) -> None:
    """The grad-norm panel (log scale) with the EMA alarms shaded."""
    t = result.table.select("step", "grad_norm").drop_nulls()
    t = t.filter(t["grad_norm"] > 0)
    _line(gx, t["step"].to_numpy(), t["grad_norm"].to_numpy(), lw=0.7, color="tab:purple")
    if t.height:
        gx.set_yscale("log")
    for a in result.alarms:
        if a.kind == "grad_norm_alarm":
            gx.axvspan(a.step, max(a.end_step, a.step + 1), color="tab:red", alpha=0.25)
    gx.set_ylabel("grad norm")


def _plot_lr_and_loss_scale(lx: Any, result: TriageResult) -> None:
    """The lr panel, with the fp16 loss scale on a second axis and its collapses shaded."""
    if _has(result, "lr"):
        t = result.table.select("step", "lr").drop_nulls()
        _line(lx, t["step"].to_numpy(), t["lr"].to_numpy(), color="tab:green", lw=1)
        lx.set_ylabel("lr")
    if not _has(result, "loss_scale"):
        return
    sx = lx.twinx()
    t = result.table.select("step", "loss_scale").drop_nulls()
    t = t.filter(t["loss_scale"] > 0)
    _line(
        sx,
        t["step"].to_numpy(),
        t["loss_scale"].to_numpy(),
        color="tab:brown",
        lw=1,
        drawstyle="steps-post",
    )
    if t.height:
        sx.set_yscale("log", base=2)
    sx.set_ylabel("loss scale")
    for a in result.alarms:
        if a.kind == "loss_scale_collapse":
            lx.axvspan(a.step, max(a.end_step, a.step + 1), color="tab:brown", alpha=0.25)


def _set_loss_ylim(ax: Any, result: TriageResult) -> None:
    """Keep the warm-up's huge initial loss from flattening the part worth reading."""
    main = next(iter(result.curves.values()))
    if len(main.loss) < 20:
        return
    start = len(main.loss) // 20
    body = main.loss[start:]
    peaks = [s.peak_loss for s in main.spikes if not s.blip]
    lo, hi = float(np.min(body)), float(max([np.quantile(body, 0.995), *peaks]))
    pad = 0.05 * (hi - lo or 1.0)
    ax.set_ylim(lo - pad, hi + pad)


def _event_counts(result: TriageResult) -> str:
    counts = result.summary["events"]
    return ", ".join(f"{v} {k}" for k, v in counts.items()) or "no events"


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
        if e["verdict"] == "malignant":
            lines.append(
                f"- **roll back to iteration {e['rollback_iteration']}** ({ev['rollback']})"
            )
            lines.append(f"- next: `{e['next_command']}`")
            if ev.get("next_command_note"):
                lines.append(f"  ({ev['next_command_note']})")
    elif kind == "divergence":
        lines.append(f"### Divergence from iteration {step}{curve}")
        lines.append(f"- {ev['summary']}")
        lines.append(f"- grad norm before it: {ev['grad_norm_before']}")
        lines.append("- likely causes, in the order to check them:")
        for i, c in enumerate(e["likely_causes"], 1):
            mark = {True: "supported", False: "not supported", None: "cannot tell"}[c["supported"]]
            lines.append(f"  {i}. {c['cause']} ({mark}): {c['evidence']}")
    elif kind == "plateau":
        lines.append(f"### Plateau, iterations {step}-{e['end_step']}{curve}")
        lines.append(f"- {ev['summary']}")
        for c in e["checks"]:
            said = c.get("evidence") or f"not checked: needs {c.get('needed')}"
            lines.append(f"- {c['check']}: {c.get('result') or 'unknown'} ({said})")
        lines.append(f"- **conclusion**: {e['conclusion']}")
    else:
        title = "Grad-norm alarm" if kind == "grad_norm_alarm" else "fp16 loss-scale collapse"
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
        f"**Status: {s['status']}** ({_event_counts(result)}).",
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
    lines = [f"[{color}]{s['status'].upper()}[/]  {terminal_safe(_event_counts(result), 200)}"]
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
        summary = terminal_safe(e.get("evidence", {}).get("summary", ""), 160)
        head = f"  {e['kind']} @ {e['step']}"
        if e["kind"] == "spike":
            tcolor = {"benign": "green", "malignant": "red", "undecided": "yellow"}[e["verdict"]]
            head += f" [{tcolor}]{e['verdict']}[/]"
        lines.append(f"{head}: {summary}")
        if e["kind"] == "plateau":
            lines.append(f"    -> {terminal_safe(e['conclusion'], 200)}")
        if e["kind"] == "divergence":
            first = next((c for c in e["likely_causes"] if c["supported"]), None)
            if first:
                lines.append(
                    f"    -> check first: {terminal_safe(first['cause'], 200)} "
                    f"({terminal_safe(first['evidence'], 300)})"
                )
        if e.get("next_command"):
            command = escape(e["next_command"])
            lines.append(f"    roll back to {e['rollback_iteration']}; next: {command}")
    n_benign = sum(1 for e in result.events if e["kind"] == "spike" and e["verdict"] == "benign")
    if n_benign:
        lines.append(f"  {n_benign} benign spikes (see report.md)")
    return lines
