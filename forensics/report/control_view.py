"""The first screen when no data culprit is named: the clean control, or what is left open.

Three cases, worded once here for every medium (forensics.cluster.controls decides them):
- dirty data in the window that no verdict blames: not cleared (confidence.no_culprit_lines);
- groups that changed and that no scorer flags: "unexplained: the model could tell", with the
  spike command that asks the pre-spike checkpoint;
- neither: the data looks like the baseline. The figures say how much it does, and the next step
  is the cause triage supports in the training log (learning rate, clipping, loss scale, device),
  or the order to check them in when no log was read.
"""

from __future__ import annotations

from typing import Any

from forensics.cluster.controls import new_unchecked
from forensics.report.numbers import pct

Line = tuple[str, str]
# triage's causes besides the data, in its order (forensics.triage.regimes), for a report
# without a log to read them from
TRIAGE_CAUSES = (
    "learning rate too high or no warmup",
    "gradient clipping misconfigured",
    "fp16 loss scale collapsed",
    "a faulty device",
)
DATA_CAUSE = "the data"


def next_causes(events: list[dict[str, Any]], step: int) -> list[dict[str, Any]]:
    """triage's ranked causes of the spike event nearest `step` (its `likely_causes`), without
    the data's own: the causes to check once the data is cleared. [] without such an event."""
    spikes = [e for e in events if e.get("likely_causes")]
    if not spikes:
        return []
    nearest = min(spikes, key=lambda e: abs(int(e.get("step", step)) - step))
    return [
        {k: c.get(k) for k in ("cause", "supported", "evidence")}
        for c in nearest["likely_causes"]
        if not str(c.get("cause", "")).startswith(DATA_CAUSE)
    ]


def next_step(report: Any) -> str:
    """What to check next when the data is cleared: triage's supported causes, else the ones
    the log cannot rule out, else triage's list in its order."""
    causes = report.next_causes or []
    supported = [c for c in causes if c.get("supported") is True]
    if supported:
        first = supported[0]
        more = ", ".join(str(c["cause"]) for c in supported[1:])
        return f"triage supports {first['cause']}: {first['evidence']}" + (
            f"; also supported: {more}" if more else ""
        )
    open_ = [str(c["cause"]) for c in causes if c.get("supported") is None]
    if open_:
        return "triage supports no cause in the log; not ruled out: " + ", ".join(open_)
    if causes:
        return (
            "triage rules out "
            + ", ".join(str(c["cause"]) for c in causes)
            + (": rerun the step on other nodes and compare per-rank losses")
        )
    return "run forensics triage on the training log; the causes it checks, in order: " + ", ".join(
        TRIAGE_CAUSES
    )


def control_figures(report: Any) -> str:
    """ "2.1% of the window's 1,234 documents flagged, 1.9% of the baseline's 1,100; 57 groups
    tested, none dirty, none over-represented without a blend share to explain it"."""
    c = report.control or {}
    groups = report.clusters.height
    return (
        f"{pct(c.get('window_flagged_rate', 0.0))} of the window's "
        f"{int(c.get('window_docs', 0)):,} documents flagged, "
        f"{pct(c.get('baseline_flagged_rate', 0.0))} of the baseline's "
        f"{int(c.get('baseline_docs', 0)):,}; {groups} groups tested: none dirtier than its "
        "background, none over-represented or new without an explanation"
    )


def clean_control_lines(report: Any) -> list[Line]:
    """NO CULPRIT ("the data looks like the baseline") and NEXT: the clean control, nothing
    skipped or removed."""
    return [
        ("NO CULPRIT", "the data looks like the baseline: " + control_figures(report)),
        ("", "nothing is skipped or removed: skip.json holds no ranges and an empty block list"),
        ("NEXT", next_step(report)),
    ]


def unchecked_lines(report: Any) -> list[Line]:
    """Under the MODEL line when no checkpoint was rescored: groups new in the window at the
    share the blend gives them that no scorer flags (their content is only the model's to
    judge), and the command that asks the checkpoint."""
    if report.model:
        return []
    groups = new_unchecked(report.clusters)
    if groups.height == 0:
        return []
    names = ", ".join(f"{r['facet']}={r['key']}" for r in groups.head(3).iter_rows(named=True))
    more = f" (+{groups.height - 3} more)" if groups.height > 3 else ""
    out: list[Line] = [(
        "",
        f"not checked: new in the window at the share the blend gives: {names}{more}; no "
        "scorer flags them, and dirt no scorer was built for (word salad, dumps) only the "
        "model can see",
    )]  # fmt: skip
    if report.checkpoint_command:
        out.append(("", f"ask the pre-spike checkpoint: {report.checkpoint_command}"))
    return out


def unexplained_lines(report: Any) -> list[Line]:
    """OPEN: each group that changed and that no scorer flags (three at most, then a
    count), and the command that asks the model."""
    groups = report.unexplained
    out: list[Line] = []
    for i, r in enumerate(groups.head(3).iter_rows(named=True)):
        how = "new in the window" if r.get("new_in_window") else f"{r['enrichment']:.1f}x"
        text = (
            f"unexplained: {r['facet']}={r['key']}: {how}, {pct(r['window_share'])} of the "
            f"window's documents ({pct(r['baseline_share'])} of the baseline's), "
            f"{pct(r['flagged_rate'])} flagged: no scorer explains it; the model could tell"
        )
        out.append(("OPEN" if i == 0 else "", text))
    if groups.height > 3:
        out.append(("", f"{groups.height} such groups in all"))
    command = report.checkpoint_command
    if command:
        out.append(("", f"ask the pre-spike checkpoint: {command}"))
    return out


def no_culprit_headline(report: Any) -> str:
    """The headline's verdict when no culprit is named."""
    dirty = report.dirty_groups is not None and report.dirty_groups.height > 0
    if dirty:
        return "no culprit; dirty data in the window is not cleared"
    groups = report.unexplained
    if groups is not None and groups.height:
        r = groups.row(0, named=True)
        more = f" (+{groups.height - 1} more)" if groups.height > 1 else ""
        return (
            f"no culprit named; {r['facet']}={r['key']}{more} changed and no scorer flags it: "
            "rescore with --checkpoint, the model could tell"
        )
    return "no data culprit: the data looks like the baseline; nothing to skip or remove"
