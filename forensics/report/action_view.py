"""The first screen's ACTION lines: the decision of forensics.skip.action (skip.json `action`),
worded for the report and the terminal, so all three lead with the same action."""

from __future__ import annotations

from typing import Any

from forensics.skip.action import rebuild_restart

LEADS_WITH_REMOVAL = ("rebuild", "remove")


def skip_label(skip: dict[str, Any]) -> str:
    """SKIP when skipping is the fix, STOPGAP when removing the data leads."""
    action = skip.get("action") or {}
    return "STOPGAP" if action.get("kind") in LEADS_WITH_REMOVAL else "SKIP"


def action_lines(skip: dict[str, Any], rollback: int | None) -> list[tuple[str, str]]:
    """(label, raw text) lines; empty when there is no decision (no culprit, old skip file)."""
    action = skip.get("action") or {}
    kind = action.get("kind")
    if kind in LEADS_WITH_REMOVAL:
        lead = "remove and rebuild: " if kind == "rebuild" else "remove the culprit: "
        lines = [("ACTION", lead + str(action["command"])), ("", str(action["why"]))]
        restart = f"then restart from checkpoint iteration {rollback}" if rollback else "then"
        if kind == "rebuild":
            restart += " " + rebuild_restart(action)
        else:
            restart += " on the filtered data"
        lines.append(("", restart + "; the data order changes from the restart on"))
        if action.get("stopgap"):
            lines.append(("", "stopgap, if the restart cannot wait: STOPGAP and PASTE below"))
        return lines
    if kind == "skip":
        return [("ACTION", "skip the iterations below (SKIP, PASTE)"), ("", str(action["why"]))]
    return []
