"""Per-domain curves read together: one incident where their events coincide.

The field guide keeps per-domain curves (web, code, math...) so that a change in one domain's
data is located at once. Read together:

- one domain moving alone (the total moves with it, the other domains hold) is that domain's
  data: the data cause is supported and names the domain, and so do the terminal line, the plot,
  events.json (`domain`) and the spike command (its output folder and the window's note);
- every domain moving at once is one incident, not one event per curve, and points at the
  numerics or the optimizer first (a data problem shows in one domain's curve before the rest);
- some domains but not all: one incident, the causes as the main curve's.

Events coincide when their onsets are within `max(10 logged rows, 20 steps)` of each other.
"""

from __future__ import annotations

import shlex
from typing import Any

import numpy as np

from forensics.triage.actions import cause_check, event_action
from forensics.triage.causes import DATA, NUMERICS, cause, rank_causes
from forensics.triage.config import RunInfo

GROUPED = ("spike", "divergence")


def _domain(curve: str) -> str:
    return curve.split(":", 1)[1]


def coincide_steps(steps: np.ndarray) -> int:
    interval = float(np.median(np.diff(steps))) if len(steps) > 1 else 1.0
    return int(max(10 * interval, 20))


def group_incidents(
    events: list[dict[str, Any]], curve_names: list[str], steps: np.ndarray
) -> list[dict[str, Any]]:
    """Events with coincident per-domain events merged into one incident each (see the module
    docstring); the list is unchanged when the log has no per-domain curve."""
    domains = [c for c in curve_names if c.startswith("loss:")]
    if not domains:
        return events
    tol = coincide_steps(steps)
    loss_events = sorted(
        (e for e in events if e["kind"] in GROUPED and e.get("verdict") != "benign"),
        key=lambda e: e["step"],
    )
    groups: list[list[dict[str, Any]]] = []
    for e in loss_events:
        if groups and e["step"] - groups[-1][0]["step"] <= tol:
            groups[-1].append(e)
        else:
            groups.append([e])
    merged_away: set[int] = set()
    for group in groups:
        moved = sorted({e["curve"] for e in group if e["curve"].startswith("loss:")})
        if not moved:
            continue
        lead = next((e for e in group if e["curve"] == "loss"), group[0])
        if len(moved) == 1:
            lead = next(e for e in group if e["curve"] == moved[0])
        merged_away |= {id(e) for e in group if e is not lead}
        lead["curves"] = sorted({e["curve"] for e in group})
        held = [d for d in domains if d not in moved]
        if len(moved) == 1 and (held or "loss" not in lead["curves"]):
            _one_domain(lead, moved[0], held)
        elif not held and len(domains) >= 2:
            _all_domains(lead, moved)
        else:
            lead["scope"] = "some domains"
    return [e for e in events if id(e) not in merged_away]


def _one_domain(ev: dict[str, Any], curve: str, held: list[str]) -> None:
    """One domain alone: that domain's data."""
    domain = _domain(curve)
    ev["scope"], ev["domain"], ev["curve"] = "one domain", domain, curve
    others = ", ".join(_domain(h) for h in held) or "the total without it"
    data = cause(
        DATA,
        True,
        f"only the {domain} curve moved at step {ev['step']}; the other domains ({others}) "
        f"held: {domain}'s data, the documents of domain {domain} in the window",
    )
    rest = [c for c in ev.get("likely_causes", []) if c["cause"] != DATA]
    ev["likely_causes"] = rank_causes([data, *rest])
    if "spike_command" in ev:
        folder = shlex.quote(f"spike-{ev['step']}-{domain}/")
        ev["spike_command"] = ev["spike_command"].replace(
            f"--out spike-{ev['step']}/", f"--out {folder}"
        )
        ev["next_command"] = ev["spike_command"]
        ev["replay_suggested"] = True
        note = ev["evidence"].get("next_command_note") or ""
        ev["evidence"]["next_command_note"] = (
            f"the suspects are the window's {domain} documents (only {domain}'s loss moved); "
            + note
        )
    if ev.get("rollback_iteration") is not None:
        ev["action"] = event_action(ev)


def _all_domains(ev: dict[str, Any], moved: list[str]) -> None:
    """Every domain at once: one incident, numerics or the optimizer first."""
    ev["scope"] = "all domains"
    numerics = cause(
        NUMERICS,
        True,
        f"every domain ({', '.join(_domain(m) for m in moved)}) moved at step {ev['step']} at "
        "once: a data problem shows in one domain's curve first",
    )
    causes = []
    for c in ev.get("likely_causes", []):
        if c["cause"] == DATA:
            c = cause(
                DATA,
                None,
                "every domain moved at once, so not one domain's data; a blend-wide change "
                "(a new stage, a tokenizer change) can still do it",
            )
        causes.append(c)
    ev["likely_causes"] = rank_causes([numerics, *causes])
    if ev.get("rollback_iteration") is not None:
        ev["next_command"] = cause_check(
            numerics, ev["step"], ev["rollback_iteration"], RunInfo(config_path=_config_of(ev))
        )
        ev["replay_suggested"] = False
        ev["action"] = event_action(ev)


def _config_of(ev: dict[str, Any]) -> str | None:
    """The config path the spike command was written with (None for the placeholder)."""
    words = shlex.split(ev.get("spike_command", ""))
    if "--config" in words:
        path = words[words.index("--config") + 1]
        return None if path.startswith("<") else path
    return None
