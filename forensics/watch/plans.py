"""The watcher's plan for each spike, prepared while the run trains.

A spike that has not come back is undecided for up to its recovery window, but the analysis
need not wait: the watcher starts `forensics spike` as soon as the spike is raised and, when it
ends, posts a provisional plan ("provisional culprit X; roll back to R; decide by step S").
Triage's verdict then confirms it (malignant, or a divergence) or clears it (benign: the loss
came back, keep training). Without a config there is no analysis to run: the provisional plan
is triage's own (rollback point, spike command, decide-by step) and is posted at once.

Each plan moves through at most three statuses, each posted once: provisional, confirmed,
cleared. `PlanState` is rebuilt from events.jsonl when a watcher restarts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PLAN_KINDS = ("spike", "divergence")


@dataclass
class PlanState:
    """One spike's plan: the latest triage event, its verdict, the analysis (the finished
    spike run's message body, when there is one) and the last status posted."""

    event: dict[str, Any] = field(default_factory=dict)
    verdict: str = "undecided"
    started: bool = False
    result: dict[str, Any] | None = None
    posted: str | None = None


def event_verdict(ev: dict[str, Any]) -> str:
    """A divergence needs the plan as a malignant spike does."""
    return "malignant" if ev.get("kind") == "divergence" else str(ev.get("verdict"))


def next_status(state: PlanState, analysing: bool) -> str | None:
    """The status to post now, or None: a plan is provisional while undecided, confirmed once
    malignant, cleared once benign (only if something was posted or started); while the
    analysis runs, nothing is posted but a clearing (the culprit is not known yet)."""
    if state.verdict == "benign":
        wanted = "cleared" if state.posted or state.started else None
    elif analysing:
        return None
    else:
        wanted = "confirmed" if state.verdict == "malignant" else "provisional"
    if wanted is None or wanted == state.posted:
        return None
    if state.posted in ("confirmed", "cleared") and wanted == "provisional":
        return None  # a plan never goes back to provisional
    return wanted


def _culprit_words(result: dict[str, Any] | None) -> str:
    if result is None:
        return ""
    if not result.get("ok"):
        return f"the analysis failed ({result.get('summary', '')})"
    if result.get("culprit"):
        return str(result.get("culprit_cluster") or result["culprit"])
    return "no data culprit (the data looks like the baseline)"


def plan_message(step: int, state: PlanState, status: str) -> dict[str, Any]:
    """The plan message: what to do for the spike at `step`, in one line first."""
    ev, result = state.event, state.result
    ok = bool(result and result.get("ok"))
    rollback = (result or {}).get("rollback_iteration") if ok else ev.get("rollback_iteration")
    decide_by = (ev.get("decide") or {}).get("back_by_step")
    culprit = _culprit_words(result)
    what = "divergence" if ev.get("kind") == "divergence" else "spike"
    if status == "cleared":
        back = (ev.get("evidence") or {}).get("recovered_step")
        summary = (
            f"plan cleared: the {what} at step {step} came back"
            + (f" by step {back}" if back is not None else "")
            + " (benign): no rollback, keep training"
        )
    else:
        head = "provisional plan" if status == "provisional" else "plan confirmed"
        why = "" if status == "provisional" else f" ({state.verdict})"
        parts = [f"{head}{why} for the {what} at step {step}"]
        if what == "divergence":
            parts.append("STOP NOW: stop the run (an emergency, not a wait-and-see)")
        if culprit:
            parts.append(
                ("provisional culprit " if status == "provisional" else "culprit ") + culprit
            )
        parts.append(f"roll back to {rollback}")
        if status == "provisional" and decide_by is not None:
            parts.append(f"decide by step {decide_by}")
        if ok and result and result.get("action_text"):
            parts.append(str(result["action_text"]))
        elif ev.get("next_command"):
            parts.append(f"next: {ev['next_command']}")
        summary = "; ".join(parts)
    return {
        "message": "plan",
        "kind": "spike_plan",
        "step": step,
        "status": status,
        "verdict": state.verdict,
        "culprit": (result or {}).get("culprit_cluster") if ok else None,
        "rollback_iteration": rollback,
        "decide_by_step": decide_by,
        "next_command": ev.get("next_command"),
        "action": ev.get("action"),
        "action_text": (result or {}).get("action_text") if ok else None,
        "summary": summary,
    }


def restore(messages: list[dict[str, Any]], key_of: Any) -> dict[int, PlanState]:
    """The plans as a previous watcher left them, from its messages in order; `key_of(msg)`
    gives the step a raised/verdict message's event is known by."""
    plans: dict[int, PlanState] = {}
    for msg in messages:
        kind, message = msg.get("kind"), msg.get("message")
        if message in ("raised", "verdict") and kind in PLAN_KINDS and msg.get("event"):
            state = plans.setdefault(key_of(msg), PlanState())
            state.event, state.verdict = msg["event"], event_verdict(msg["event"])
        elif message == "forensics_started":
            plans.setdefault(int(msg["step"]), PlanState()).started = True
        elif message == "forensics":
            plans.setdefault(int(msg["step"]), PlanState()).result = msg
        elif message == "plan":
            plans.setdefault(int(msg["step"]), PlanState()).posted = msg.get("status")
    return plans
