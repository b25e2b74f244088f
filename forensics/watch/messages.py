"""The watcher's own messages built from what it saw: a raised or judged event, and the log
stalling or growing again (what `Watcher` appends to events.jsonl and posts)."""

from __future__ import annotations

import time
from typing import Any


def stall_message(kind: str, step: int | None, last_growth: float) -> dict[str, Any]:
    """`log_stalled` (the log has not grown for --stall-after) or `log_resumed`."""
    idle = time.time() - last_growth
    summary = (
        f"the log has not grown for {idle:.0f} s (last step {step}): is the job alive?"
        if kind == "log_stalled"
        else f"the log grows again (after step {step})"
    )
    return {"message": "note", "kind": kind, "at_step": step, "summary": summary}


def event_message(
    message: str, ev: dict[str, Any], at_step: int | None, at_line: int | None, poll: int
) -> dict[str, Any]:
    """A triage event raised (`raised`) or judged (`verdict`), with where the watcher was."""
    kind = ev["kind"]
    verdict = ev.get("verdict")
    where = f" on {ev['curve']}" if ev.get("curve") else ""
    summary = ev.get("evidence", {}).get("summary", "")
    head = f"{kind}{where} at step {ev['step']}"
    if verdict:
        head += f": {verdict}"
    causes = ev.get("likely_causes") or []
    if causes and verdict != "benign":
        summary += f"; top cause: {causes[0]['cause']}"
    if kind == "divergence":
        summary += f"; {ev['action']}"
    elif ev.get("next_command"):
        summary += f"; roll back to {ev['rollback_iteration']}; next: {ev['next_command']}"
    return {
        "message": message,
        "kind": kind,
        "curve": ev.get("curve"),
        "step": int(ev["step"]),
        "end_step": ev.get("end_step", ev.get("peak_step")),
        "verdict": verdict,
        "at_step": at_step,
        "at_line": at_line,
        "poll": poll,
        "summary": f"{head}: {summary}",
        "event": ev,
    }
