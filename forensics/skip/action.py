"""Which action leads the restart plan: remove the culprit's documents and rebuild, or skip.

Skipping iterations removes the culprit only from the batches it names. When the culprit keeps
coming in the rest of the run (the AHEAD summary of the forward exposure), a skip list only
postpones the next spike: the data itself must change (`forensics rebuild`), and the skip flags
are then a stopgap for a restart that cannot wait for the rebuild. When it is confined to the
window, skipping the window's iterations is the whole fix. One decision, written into skip.json
(`action`) and read by the report and the terminal, so they always agree.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from dataloaders.families import DEFAULT_FAMILY, family_of
from dataloaders.trainers import Trainer
from forensics.skip.ranges import expand
from forensics.skip.units import refusal

# The culprit's share of the rest of the run's samples from which removing it leads. At 1% of
# every remaining batch the run trains on about as much of it again as the window held in the
# demo's spike (4% of the window's documents over 60 iterations); below it, the skip list
# plus --skip-ahead for its densest iterations is the proportionate fix.
MATERIAL_AHEAD_SHARE = 0.01

REBUILD = "rebuild"  # remove the block list's documents and rebuild the data
REMOVE = "remove"  # the same, by the user's own pipeline (no rebuild for this block list)
SKIP = "skip"  # skip the listed iterations on a restart from the rollback checkpoint
NOTHING = "none"  # no culprit, nothing to skip


def rebuild_command(
    out: Path, config_source: Path | None, from_megatron_args: bool, origin: str | None = None
) -> str:
    """The `forensics rebuild` line for this spike directory, as the user would type it: the
    config is named unless it is the runbook's ./forensics.yaml (or the checkpoint directory
    it was read from, `origin`)."""
    parts = ["forensics", "rebuild", str(out)]
    if origin is not None:
        flag, _, value = origin.partition(" ")
        return shlex.join([*parts, flag, value])
    if from_megatron_args:
        parts += ["--megatron-args", "'<the same arguments>'"]
        return " ".join(shlex.quote(p) for p in parts[:3]) + " " + " ".join(parts[3:])
    if config_source is not None and config_source != (Path.cwd() / "forensics.yaml").resolve():
        parts += ["--config", str(config_source)]
    return shlex.join(parts)


def decide_action(
    ahead: dict[str, Any],
    *,
    skip_iterations: int,
    blocked_documents: int,
    command: str | None,
    no_skip: str | None = None,
) -> dict[str, Any]:
    """skip.json's `action`: kind (rebuild / remove / skip / none), the share ahead it was
    decided on and the threshold, the command to run first, the stopgap, and why in words.

    `command` is None when the data family has no rebuild (the documents are then removed by
    the user's own pipeline: kind `remove`). `no_skip` is the run's trainer's reason when it
    has no skip option (`Trainer.no_skip`): removing the culprit then leads at any share, with
    no stopgap.
    """
    share = float(ahead.get("share_of_remaining_samples", 0.0) or 0.0)
    held = int(ahead.get("iterations_holding_it", 0) or 0)
    n = int(ahead.get("iterations", 0) or 0)
    base = {"share_ahead": share, "material_share": MATERIAL_AHEAD_SHARE}
    if no_skip and skip_iterations:
        return base | _without_skip(no_skip, share, blocked_documents, command)
    if blocked_documents and share >= MATERIAL_AHEAD_SHARE:
        where = f"it is {100 * share:.1f}% of the samples of the rest of the run"
        where += f" (in {held:,} of {n:,} iterations)" if n else ""
        kind = REBUILD if command else REMOVE
        first = command or "remove the block list's documents (skip.json: documents) from the data"
        stopgap = "skip the listed iterations" if skip_iterations else None
        why = (
            f"{where}, at least {100 * MATERIAL_AHEAD_SHARE:g}%: skipping iterations cannot "
            "avoid it, so remove its documents and restart on the rebuilt data"
        )
        if stopgap:
            why += "; the skip flags are a stopgap for a restart that cannot wait"
        return base | {"kind": kind, "command": first, "stopgap": stopgap, "why": why}
    if skip_iterations:
        why = (
            f"it is {100 * share:.2f}% of the samples ahead, under "
            f"{100 * MATERIAL_AHEAD_SHARE:g}%: skipping the listed iterations is the fix"
        )
        if blocked_documents:
            why += "; the block list stays in skip.json to remove later"
        return base | {"kind": SKIP, "command": None, "stopgap": None, "why": why}
    why = "no culprit data to remove and no iteration to skip"
    return base | {"kind": NOTHING, "command": None, "stopgap": None, "why": why}


def _without_skip(
    no_skip: str, share: float, blocked_documents: int, command: str | None
) -> dict[str, Any]:
    """The action for a trainer that cannot skip: remove the block list's documents (rebuild
    where `forensics rebuild` can), or nothing to remove."""
    where = f"it is {100 * share:.2f}% of the samples of the rest of the run"
    if not blocked_documents:
        why = f"{no_skip}, and the culprit has no block list to remove"
        return {"kind": NOTHING, "command": None, "stopgap": None, "why": why}
    first = command or "remove the block list's documents (skip.json: documents) from the data"
    why = f"{where}; {no_skip}"
    return {"kind": REBUILD if command else REMOVE, "command": first, "stopgap": None, "why": why}


def shown_path(path: Path) -> Path:
    """`path` relative to the working directory when it lies inside it (as a user types it)."""
    try:
        return Path(path).resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return Path(path)


def action_for_plan(
    skip: Any, config: Any, out: Path, trainer: Trainer, replayer: Any = None
) -> dict[str, Any]:
    """decide_action for a SkipPlan of a run trained by `trainer`: the rebuild command where
    `forensics rebuild` can write the data without the block list (Megatron .bin/.idx; for the
    file-based families when the block list is whole files, `forensics.skip.units`), the user's
    own removal otherwise."""
    out = shown_path(out)
    command = None
    if rebuildable(skip, config, replayer):
        origin = config.origin
        command = rebuild_command(out, config.source, config.source is None and not origin, origin)
    action = decide_action(
        skip.ahead,
        skip_iterations=len(expand(skip.ranges)),
        blocked_documents=sum(len(v) for v in skip.documents.values()),
        command=command,
        no_skip=trainer.no_skip,
    )
    action["flags_dir"] = str(out)  # restart-<trainer>.flags: a $(cat ...) that works from here
    if action["kind"] == REMOVE and trainer.no_skip:  # no flags file will carry the pin
        action["restart_pin"] = trainer.pin(int(skip.rollback["iteration"]))
    if action["kind"] == REBUILD:  # where the rebuild writes by default (beside the spike dir)
        action["rebuild_out"] = str(Path(out).parent / f"rebuild-{skip.step}")
        # what the restart is given from the rebuild's folder (forensics.rebuild writes it)
        restart = family_of(config).restart
        name, what, flags = restart.name, restart.holds, restart.is_flags
        later = later_stages(config, int(skip.rollback["iteration"]) + 1)
        if later:  # Megatron-LM reads one --data-path per launch (forensics.rebuild.launches)
            what += (
                f", for launch 1 of {len(later) + 1}; each later data stage (from iteration "
                f"{', '.join(map(str, later))}) gets its own launch file: see rebuild.md"
            )
        pin = trainer.pin(int(skip.rollback["iteration"]))
        if family_of(config).pins_rollback and trainer.pin_leads_flags(pin):
            action["restart_pin"] = pin  # the family's restart file does not load the rollback
        action |= {
            "restart_file": f"{action['rebuild_out']}/{name}",
            "restart_holds": what,
            "restart_is_flags": flags,
            "restart_needs_eval": flags and needs_quotes(config, action["rebuild_out"]),
        }
    return action


def needs_quotes(config: Any, rebuild_out: str) -> bool:
    """Whether the rebuild's flags will hold a quoted path (a space, `$`, a quote in the output
    folder or a data prefix): `$(cat FILE)` splits such a word, `eval` keeps it whole."""
    paths = [rebuild_out, *family_of(config).flag_paths(config.data)]
    return any(shlex.quote(p) != p for p in paths)


def later_stages(config: Any, resume: int) -> list[int]:
    """First iterations of the data stages that start after `resume`, for a family whose
    trainer reads one data stage per launch (Megatron's --data-path); [] for the others."""
    family = family_of(config)
    if not family.launch_per_stage:
        return []
    return [s for s in family.stage_starts(config.data) if s > resume]


def rebuild_restart(action: dict[str, Any], *, say_what: bool = True) -> str:
    """How the restart takes the rebuild's data: "with $(cat DIR/restart-rebuilt.flags) (...)"
    for flags, "with DIR/data_files.json (...)" otherwise (skip files from before the file
    families name no file: Megatron's flags), and the trainer's rollback pin where it is a flag
    the family's restart file does not hold (torchtitan's --checkpoint.load_step=R)."""
    default = f"{action.get('rebuild_out', 'rebuild-STEP')}/restart-rebuilt.flags"
    file = action.get("restart_file") or default
    what = action.get("restart_holds") or DEFAULT_FAMILY.restart.holds
    shown = shlex.quote(str(file))
    if not action.get("restart_is_flags", True):
        text = f"with {shown}"
    elif action.get("restart_needs_eval"):  # quoted paths: $(cat) would split them
        text = f'with eval "<your launch command> $(cat {shown})"'
    else:
        text = f"with $(cat {shown})"
    text = f"{text} ({what})" if say_what else text
    pin = action.get("restart_pin")  # a flag of its own: the file does not hold it
    return f"{text} and {pin} on the launch line" if pin else text


def rebuildable(skip: Any, config: Any, replayer: Any) -> bool:
    """Whether `forensics rebuild` can remove this block list: any run of a family that rebuilds
    documents (Megatron); a file-based run (with its replayer) when every blocked document set
    is whole files."""
    family = family_of(config)
    if family.rebuilds_documents:
        return True
    documents = {k: v for k, v in skip.documents.items() if v}
    if family.file_facet is None or replayer is None or not documents:
        return False
    return refusal(config, replayer, documents) is None
