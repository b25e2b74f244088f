"""The skip plan as the report shows it: typed, read once from skip.json's plan, so no renderer
digs through a dict for optional keys.

`ReportSkip.from_plan` takes the spike pipeline's `forensics.skip.plan.SkipPlan`;
`ReportSkip.from_dict` takes the same shape back from report.json's `skip` (or a test's dict),
and `to_dict` writes that shape. Everything a renderer needs that is derived from the action
(how the restart takes the rebuilt data, the restart line of each trainer) is computed here,
before any rendering.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from forensics.skip.action import rebuild_restart
from forensics.skip.flags import TrainerFlag, restart_line

LEADS_WITH_REMOVAL = ("rebuild", "remove")


@dataclass(frozen=True)
class ActionView:
    """skip.json's `action` (forensics.skip.action.decide_action / action_for_plan).

    kind          rebuild / remove / skip / none ("" for a skip file without an action)
    command       what to run first (rebuild, remove); None for skip
    why           the decision in words
    stopgap       the stopgap's wording when skipping is one, else None
    flags_dir     the spike directory as the user typed it (restart-<trainer>.flags live there)
    rebuild_out   where the rebuild writes; restart_file, restart_holds, restart_is_flags: what
                  the restart is given from there; restart_needs_eval: its flags hold quoted
                  paths, so `$(cat FILE)` would split them and `eval` passes them whole
    restart_with  "with $(cat DIR/restart-rebuilt.flags) (what it holds)" for a rebuild, else ""
    """

    kind: str = ""
    command: str | None = None
    why: str = ""
    stopgap: str | None = None
    flags_dir: str | None = None
    rebuild_out: str | None = None
    restart_file: str | None = None
    restart_holds: str | None = None
    restart_is_flags: bool = True
    restart_needs_eval: bool = False
    restart_with: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def removes(self) -> bool:
        """Removing the culprit's documents leads (the skip flags are the stopgap)."""
        return self.kind in LEADS_WITH_REMOVAL

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ActionView:
        data = dict(data or {})
        restart = rebuild_restart(data) if data.get("kind") == "rebuild" else ""
        return cls(
            kind=str(data.get("kind") or ""),
            command=None if data.get("command") is None else str(data["command"]),
            why=str(data.get("why") or ""),
            stopgap=data.get("stopgap"),
            flags_dir=data.get("flags_dir"),
            rebuild_out=data.get("rebuild_out"),
            restart_file=data.get("restart_file"),
            restart_holds=data.get("restart_holds"),
            restart_is_flags=bool(data.get("restart_is_flags", True)),
            restart_needs_eval=bool(data.get("restart_needs_eval", False)),
            restart_with=restart,
            raw=data,
        )


@dataclass(frozen=True)
class ReportSkip:
    """What the report shows of the skip plan (counts, not the block list itself).

    iterations     the ranges to skip, inclusive
    trainer        the run's trainer; flags: every trainer's flag (or refusal), by name
    lines          each trainer's restart-<trainer>.flags line (None when refused)
    collateral     clean samples skipped, culprit samples missed
    documents      block-list size; seen_in_window: how many of them the window drew
    ahead          the AHEAD advice in words
    """

    iterations: list[list[int]]
    trainer: str
    flags: dict[str, TrainerFlag]
    collateral: dict[str, Any] = field(default_factory=dict)
    documents: int | None = None
    seen_in_window: int | None = None
    ahead: str = ""
    tracker_file: str | None = None
    action: ActionView = field(default_factory=ActionView)

    @property
    def chosen(self) -> TrainerFlag | None:
        return self.flags.get(self.trainer)

    def line(self, name: str) -> str | None:
        """restart-<name>.flags's line: the pin first where it is a flag, then the skip flag."""
        return restart_line(self.flags[name]) if name in self.flags else None

    @classmethod
    def from_plan(cls, plan: Any) -> ReportSkip:
        """From a forensics.skip.plan.SkipPlan."""
        coll = plan.collateral
        return cls(
            iterations=[list(r) for r in plan.iterations],
            trainer=plan.trainer,
            flags=dict(plan.flags),
            collateral={
                "clean_samples_skipped": coll["clean_samples_skipped"],
                "culprit_samples_missed": coll["culprit_samples_missed"],
            },
            documents=sum(len(v) for v in plan.documents.values()),
            seen_in_window=int(plan.documents_seen_in_window),
            ahead=str(plan.ahead["advice"]),
            tracker_file=plan.tracker_file,
            action=ActionView.from_dict(plan.action),
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReportSkip:
        """From report.json's `skip` (the shape to_dict writes)."""
        ahead = data.get("ahead") or ""
        if isinstance(ahead, dict):
            ahead = "; ".join(f"{k.replace('_', ' ')}: {v}" for k, v in ahead.items())
        flags = {
            name: flag if isinstance(flag, TrainerFlag) else _flag(name, flag)
            for name, flag in (data.get("flags") or {}).items()
        }
        seen = data.get("seen_in_window")
        return cls(
            iterations=[list(r) for r in data.get("iterations") or []],
            trainer=str(data.get("trainer") or ""),
            flags=flags,
            collateral=dict(data.get("collateral") or {}),
            documents=None if data.get("documents") is None else int(data["documents"]),
            seen_in_window=None if seen is None else int(seen),
            ahead=str(ahead),
            tracker_file=data.get("tracker_file"),
            action=ActionView.from_dict(data.get("action")),
        )

    def to_dict(self) -> dict[str, Any]:
        """report.json's `skip`."""
        return {
            "iterations": self.iterations,
            "collateral": self.collateral,
            "documents": self.documents,
            "seen_in_window": self.seen_in_window,
            "ahead": self.ahead,
            "trainer": self.trainer,
            "flags": {name: flag.to_dict() for name, flag in self.flags.items()},
            "tracker_file": self.tracker_file,
            "action": self.action.raw,
        }


def _flag(name: str, data: dict[str, Any]) -> TrainerFlag:
    """A TrainerFlag from a dict that may lack the optional keys (a hand-written test plan)."""
    return TrainerFlag(
        trainer=str(data.get("trainer") or name),
        flag=data.get("flag"),
        values=data.get("values"),
        semantics=str(data.get("semantics") or ""),
        consequence=str(data.get("consequence") or ""),
        refusal=data.get("refusal"),
        pin=data.get("pin"),
    )
