"""Does a skip file fit the run at hand? One validation for every command that reads skip.json
(check-skip, rebuild), so that a file one of them refuses is never acted on by the other.

- the fingerprint: the data changed (refused), the run directory moved with byte-identical data
  (a note), the checkpoint list changed (a note) (forensics.skip.runmatch);
- the rollback: an iteration before the spike, within training, a checkpoint of the run when
  the run lists any (and not "a checkpoint" at iteration 0, where none is ever saved);
- the ranges: after the rollback, before the end of training, and the samples they name are the
  ones this run's schedule gives (an edited range is refused).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.errors import ForensicsError
from forensics.replay import open_replayer
from forensics.skip import json_fingerprint, sample_ranges
from forensics.skip.runmatch import match_run, rollback_refusal

if TYPE_CHECKING:
    from dataloaders.run_config import RunConfig
    from forensics.skip.plan import SkipPlan


def describe_config(config: RunConfig) -> str:
    """Where a config came from, for messages: its file, the checkpoint it was read from, or
    the Megatron arguments."""
    if config.origin:
        return f"the run read by {config.origin}"
    return str(config.source) if config.source is not None else "the given --megatron-args"


def rollback_problem(plan: SkipPlan, last_iteration: int) -> str | None:
    """What is wrong with the rollback against the spike and the length of training, or None."""
    rollback = int(plan.rollback["iteration"])
    resume = plan.rollback.get("resume_iteration", rollback + 1)
    if rollback < 0:
        return f"rollback iteration {rollback} is negative (edited?)"
    if rollback >= plan.step:
        return (
            f"rollback iteration {rollback} is not before the spike at iteration {plan.step} "
            "(edited?): the restart would train on the spike's batches again"
        )
    if rollback > last_iteration:
        return f"rollback iteration {rollback} is past the end of training ({last_iteration})"
    if resume != rollback + 1:
        return f"rollback.resume_iteration {resume!r} is not rollback.iteration + 1 (edited?)"
    if rollback == 0 and plan.rollback.get("checkpoint"):
        return "rollback iteration 0 is marked as a checkpoint, but none is saved before training"
    return None


def validate_for_run(
    path: Path, plan: SkipPlan, config: RunConfig, replayer: Any = None, label: str | None = None
) -> list[str]:
    """Raise ForensicsError (one line, naming `path`) unless `plan` fits the run; returns the
    notes to print for a skip file that still fits (the run moved, the checkpoints changed)."""
    replayer = replayer if replayer is not None else open_replayer(config)
    label = label or describe_config(config)
    match = match_run(plan.fingerprint, json_fingerprint(replayer), config)
    checkpoint = int(plan.rollback["iteration"])
    stale = rollback_refusal(config, checkpoint)
    # Same data but a missing rollback checkpoint: say that, it is the actionable part.
    if stale is not None and match.data_same:
        raise ForensicsError(f"{path}: {stale}")
    if match.refusal is not None:
        raise ForensicsError(f"{path}: {match.refusal} (checked against {label})")
    problem = rollback_problem(plan, replayer.last_iteration)
    if problem:
        raise ForensicsError(f"{path}: {problem}")
    ranges = plan.ranges
    if ranges:
        last = max(b for _, b in ranges)  # before anything is expanded
        if last > replayer.last_iteration:
            raise ForensicsError(
                f"{path}: skips iteration {last}, past the end of training "
                f"({replayer.last_iteration})"
            )
        if min(a for a, _ in ranges) <= checkpoint:
            raise ForensicsError(
                f"{path}: skips iterations at or before the rollback checkpoint {checkpoint}"
            )
        first = min(a for a, _ in ranges)
        expected = sample_ranges(replayer.iteration_samples(first, last), ranges)
        if expected != plan.samples:
            raise ForensicsError(f"{path}: the sample ranges do not match the iterations (edited?)")
    return match.notes
