"""The first screen an engineer woken by a spike acts on, the same in every medium:

1. one headline: the verdict, the culprit, how sure, the action;
2. one box with the action's commands in the order to run them (rebuild: the rebuild command,
   then the restart line; skip: the restart line);
3. the stopgap, labelled as such, below it (skipping iterations while a rebuild is due);
4. the reasons (forensics.report.summary).

Everything here is computed from the report's data before rendering; each renderer lays the
`FirstScreen` out for its medium and escapes its text.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from forensics.report.confidence import data_grade
from forensics.report.contents import SpikeReport, cluster_name
from forensics.report.control_view import no_culprit_headline
from forensics.report.skip_view import ReportSkip
from forensics.report.summary import (
    Line,
    _dominant_dataset,
    ranges_text,
    reason_lines,
)
from forensics.skip.flags import pin_beside

FLAG_CHARS = 100  # a longer restart line is given as $(cat DIR/restart-<trainer>.flags)
LAUNCH_END = "append to the launch line"


@dataclass(frozen=True)
class Command:
    """One step of the action: `text` is what to paste or run, whole; `note` what it does."""

    text: str
    note: str


@dataclass(frozen=True)
class FirstScreen:
    """headline: one line. action: "remove and rebuild" / "skip" / ... ("" when nothing is to
    be done). commands: in the order to run them. stopgap: (label, text) lines with
    `stopgap_command` to paste. reasons: (label, text) lines."""

    headline: str
    action: str
    commands: list[Command]
    stopgap: list[Line]
    stopgap_command: Command | None
    reasons: list[Line]

    def lines(self) -> list[Line]:
        """The whole screen as (label, text) lines (report.json's `summary`)."""
        out: list[Line] = [("", self.headline)]
        if self.action:
            out.append(("ACTION", self.action))
        out += [("", f"{i}. {c.note}: {c.text}") for i, c in enumerate(self.commands, 1)]
        out += self.stopgap
        if self.stopgap_command is not None:
            out.append(("", f"{self.stopgap_command.note}: {self.stopgap_command.text}"))
        return out + self.reasons


ACTION_WORDS = {"rebuild": "remove and rebuild", "remove": "remove the culprit", "skip": "skip"}


def action_text(skip: ReportSkip | None) -> str:
    """The ACTION line: "remove and rebuild: forensics rebuild spike-170", "skip: ...", ""."""
    if skip is None:
        return ""
    action = skip.action
    if action.removes:
        return f"{ACTION_WORDS[action.kind]}: {action.command}"
    if action.kind == "skip" or (not action.kind and skip.iterations):
        shown, total = ranges_text(skip.iterations)
        return f"skip iterations {shown} ({total} iterations) on the restart"
    return ""


def restart_command(skip: ReportSkip, rollback: int | None) -> list[Command]:
    """The skip restart: the rollback pin where it is not a flag, then the run's trainer's
    restart-<trainer>.flags line (or `$(cat ...)` of that file when the line is long)."""
    flag = skip.chosen
    line = skip.line(skip.trainer)
    if flag is None or not line:
        return []
    out = []
    from_ = f"restart from checkpoint iteration {rollback}" if rollback is not None else "restart"
    beside = pin_beside(flag)
    if beside:
        out.append(Command(beside, "load the rollback checkpoint"))
    if len(line) > FLAG_CHARS:
        folder = skip.action.flags_dir
        path = shlex.quote(f"{folder}/" * bool(folder) + f"restart-{skip.trainer}.flags")
        line = f"$(cat {path})"
    out.append(Command(line, f"{skip.trainer} {from_}: {LAUNCH_END}"))
    return out


def commands(skip: ReportSkip | None, rollback: int | None) -> list[Command]:
    """The action's commands in the order to run them."""
    if skip is None:
        return []
    action = skip.action
    at = f"checkpoint iteration {rollback}" if rollback is not None else "the rollback checkpoint"
    if action.kind == "rebuild":
        out = [Command(str(action.command), "rebuild the data without the block list")]
        file = (
            action.restart_file or f"{action.rebuild_out or 'rebuild-STEP'}/restart-rebuilt.flags"
        )
        shown = shlex.quote(file)
        holds = f" ({action.restart_holds})" if action.restart_holds else ""
        if action.restart_needs_eval:  # quoted paths inside: $(cat) would split them
            text = f'eval "<your launch command> $(cat {shown})"'
            note = f"restart from {at}, the flags at the end of the launch{holds}"
            out.append(Command(text, note))
        elif action.restart_is_flags:
            out.append(Command(f"$(cat {shown})", f"restart from {at}: {LAUNCH_END}{holds}"))
        else:
            out.append(Command(shown, f"restart from {at} {action.restart_with}; the file"))
        return out
    if action.kind == "remove":
        pin = action.raw.get("restart_pin")  # a trainer with no skip option: its load flag
        restart = "(your restart on the filtered data)" + (f" {pin}" if pin else "")
        return [
            Command(str(action.command), "remove its documents with your own pipeline"),
            Command(restart, f"restart from {at}"),
        ]
    if action.kind == "skip" or (not action.kind and skip.iterations):
        return restart_command(skip, rollback)
    return []


def stopgap(skip: ReportSkip | None, rollback: int | None) -> tuple[list[Line], Command | None]:
    """STOPGAP: when removal leads and skipping helps meanwhile, the skip restart, labelled as
    the stopgap, with what it leaves in."""
    if skip is None or not (skip.action.removes and skip.action.stopgap and skip.iterations):
        return [], None
    shown, total = ranges_text(skip.iterations)
    fix = "rebuild" if skip.action.kind == "rebuild" else "removal"
    text = (
        f"if the restart cannot wait for the {fix}: "
        f"skip iterations {shown} ({total}) instead; the culprit stays in the rest of the run"
    )
    lines: list[Line] = [("STOPGAP", text)]
    if skip.collateral:
        coll = ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in skip.collateral.items())
        lines.append(("", coll))
    found = restart_command(skip, rollback)
    if not found:
        chosen = skip.chosen
        lines.append(("", f"no exact flag for {skip.trainer}: {chosen.refusal if chosen else ''}"))
        return lines, None
    for c in found[:-1]:  # a pin that is a step of its own
        lines.append(("", f"{c.note}: {c.text}"))
    return lines, found[-1]


def headline(report: SpikeReport, action: str) -> str:
    """One line: the spike, the verdict and culprit, how sure, the action."""
    top = report.culprit
    head = f"Spike at iteration {report.step}: "
    if top is None:
        head += no_culprit_headline(report)
    else:
        dataset = _dominant_dataset(top)
        head += f"culprit {cluster_name(top)}" + (f" (dataset {dataset})" if dataset else "")
        if top.get("named_by") == "model":
            head += (
                f", named by the model (loss {top['model_effect']:+.1f} sds), no scorer flags it"
            )
        else:
            head += f", {data_grade(top)} evidence"
    at = report.rollback_iteration
    kind = report.skip.action.kind if report.skip is not None else ""
    if kind in ("rebuild", "remove"):
        head += "; remove " + ("and rebuild" if kind == "rebuild" else "its documents")
        head += f", then restart from checkpoint iteration {at}" if at is not None else ""
    elif action and report.skip is not None:
        _, total = ranges_text(report.skip.iterations)
        where = f"from checkpoint iteration {at} " if at is not None else ""
        head += f"; restart {where}skipping {total} iterations"
    elif at is not None and top is not None:
        head += f"; roll back to iteration {at}"
    return head


def first_screen(report: SpikeReport) -> FirstScreen:
    """The first screen, computed once (forensics.report.sections holds it)."""
    skip = report.skip
    action = action_text(skip)
    gap, gap_command = stopgap(skip, report.rollback_iteration)
    return FirstScreen(
        headline=headline(report, action),
        action=action,
        commands=commands(skip, report.rollback_iteration),
        stopgap=gap,
        stopgap_command=gap_command,
        reasons=reason_lines(report),
    )


def summary_lines(report: SpikeReport) -> list[Line]:
    """The first screen as (label, text) lines, raw text (report.json's `summary`)."""
    return first_screen(report).lines()
