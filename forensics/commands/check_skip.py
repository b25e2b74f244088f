"""`forensics check-skip`: is this skip.json valid for this run, and what would each string drop?

A skip list names iterations, and iteration numbers mean other batches as soon as the config,
the blend or a data file changes. Before a restart, check-skip recomputes the run's fingerprint
(config hash, data file sizes, index hashes) and refuses a skip file made for another run; then
it runs each trainer's own loop (dataloaders.trainers) on that trainer's string from the
rollback checkpoint and refuses unless it drops exactly the listed batches and trains every
other one, and prints what the chosen trainer's string drops.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dataloaders.console import make_console
from dataloaders.run_config import RunConfig, load_config
from dataloaders.trainers import Trainer, get_trainer
from forensics.commands.options import (
    ConfigOption,
    FromCheckpointOption,
    MegatronArgsOption,
    TrainerOption,
)
from forensics.errors import ForensicsError
from forensics.from_checkpoint import step_of_skip_file
from forensics.replay import open_replayer
from forensics.run_source import resolve_run_config
from forensics.skip import expand
from forensics.skip.action import REBUILD, REMOVE
from forensics.skip.flags import flag_trainer, verify_flag
from forensics.skip.plan import SkipPlan
from forensics.skip.tracker import read_tracker
from forensics.skip.validate import describe_config, validate_for_run


def check_skip(path: Path, config: Path | RunConfig, trainer: Trainer | None = None) -> SkipPlan:
    """Raise ForensicsError unless `path` fits the run of `config` (a YAML path, or a RunConfig
    such as one from --megatron-args) and every written flag drops exactly its batches."""
    return verify_skip(path, config, trainer)[0]


def verify_skip(
    path: Path, config: Path | RunConfig, trainer: Trainer | None = None
) -> tuple[SkipPlan, list[str]]:
    """check_skip, also returning notes for the user (the run directory moved, the checkpoint
    list changed) on a skip file that still fits. `trainer`: the one whose flag must be exact
    (--trainer; default the plan's)."""
    plan = SkipPlan.read(path)
    if isinstance(config, RunConfig):
        run, label = config, describe_config(config)
    else:
        run, label = load_config(config), str(config)
    replayer = open_replayer(run)
    notes = validate_for_run(path, plan, run, replayer, label)
    checkpoint = int(plan.rollback["iteration"])
    ranges = plan.ranges
    schedule = replayer.schedule
    wanted = trainer.name if trainer else plan.trainer
    if wanted not in plan.flags:
        raise ForensicsError(f"{path}: has no flag for trainer {wanted}")
    no_skip = get_trainer(wanted).no_skip
    if ranges and no_skip:  # nothing to check: the restart plan is the rebuild
        raise ForensicsError(f"{path}: {no_skip}")
    if ranges and plan.flags[wanted].flag is None:
        raise ForensicsError(
            f"{path}: no exact {wanted} flag ({plan.flags[wanted].refusal}); remove the block "
            "list's documents instead"
        )
    for name, flag in plan.flags.items():
        if flag.flag is None:
            continue
        problem = verify_flag(flag_trainer(flag), flag.flag, ranges, schedule, checkpoint)
        if problem:
            raise ForensicsError(f"{path}: the {name} flag is wrong for this run: {problem}")
    tracker = path.parent / plan.tracker_file if plan.tracker_file else None
    if tracker is not None and tracker.is_file():
        values = plan.flags[plan.trainer].values or []
        if read_tracker(tracker.read_text(encoding="utf-8", errors="replace")) != sorted(values):
            raise ForensicsError(f"{tracker}: does not list the plan's iterations (edited?)")
    return plan, notes


def ahead_line(action: dict) -> str | None:
    """When the plan leads with removing the culprit (rebuild or remove), the reason and the
    command again: a valid skip file is still only the stopgap. None for a skip-only plan."""
    if action.get("kind") not in (REBUILD, REMOVE):
        return None
    return f"{action['why']}. First: {action['command']}"


def check_skip_command(
    skip_file: Annotated[Path, typer.Argument(help="skip.json written by forensics spike.")],
    config: ConfigOption = None,
    megatron_args: MegatronArgsOption = None,
    from_checkpoint: FromCheckpointOption = None,
    trainer: TrainerOption = None,
) -> None:
    """Refuse a skip file made for another run (config, blend or data files changed); run each
    trainer's loop on its string and show what the chosen trainer's string drops."""
    from rich.markup import escape

    step = step_of_skip_file(skip_file) if from_checkpoint is not None else None
    run = resolve_run_config(config, megatron_args, from_checkpoint, step)
    plan, notes = verify_skip(skip_file, run, trainer)
    name = trainer.name if trainer else plan.trainer
    n = len(expand(plan.ranges))
    rb = plan.rollback.get("iteration")
    where = escape(describe_config(run))
    console = make_console()
    console.print(
        f"[green]ok[/]: {escape(str(skip_file))} fits {where}: {n} iterations "
        f"in {len(plan.iterations)} range(s)"
        + (f", for a restart from checkpoint iteration {rb}" if rb is not None else "")
    )
    for note in notes:
        console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
    ahead = ahead_line(plan.action)
    if ahead:
        console.print(f"[bold yellow]AHEAD[/]: {escape(ahead)}", soft_wrap=True)
    flag = plan.flags[name]
    if n:
        spans = ", ".join(f"{a}-{b}" for a, b in plan.ranges[:8])
        more = f" and {len(plan.ranges) - 8} more ranges" if len(plan.ranges) > 8 else ""
        console.print(
            f"{escape(name)}: its loop, run on the flag, drops exactly iterations {spans}{more} "
            f"({n} global batches) and trains every other batch; then: {escape(flag.consequence)}",
            soft_wrap=True,
        )
