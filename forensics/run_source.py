"""Which run a command works on: --config, a training job's launch arguments (the family
with a `launch_option`) or --from-checkpoint, one rule.

It sits above the readers (the families' `launch_run`, forensics.from_checkpoint), so none
imports another to dispatch, and it names no framework.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dataloaders.console import make_console
from dataloaders.families import REGISTRY
from dataloaders.regular_files import check_input_path
from dataloaders.run_config import config_from_dict, find_config, load_config
from forensics.errors import ForensicsError
from forensics.from_checkpoint import config_from_checkpoint
from forensics.inputs_guard import check_run_inputs
from forensics.publish_set import refuse_if_mid_publish

if TYPE_CHECKING:
    from dataloaders.run_config import RunConfig


def resolve_run_config(
    config: Path | None,
    launch_args: str | None,
    from_checkpoint: Path | None = None,
    step: int | None = None,
) -> RunConfig:
    """`_resolve`, then every file the config names checked (`check_run_inputs`): a FIFO or
    device among them is refused before any reader opens it."""
    if config is None and launch_args is None and from_checkpoint is None:
        check_input_path(find_config(None), "$FORENSICS_CONFIG")
    run = _resolve(config, launch_args, from_checkpoint, step)
    check_run_inputs(run)
    return run


def _resolve(
    config: Path | None,
    launch_args: str | None,
    from_checkpoint: Path | None = None,
    step: int | None = None,
) -> RunConfig:
    """The config a command runs on: --config or the launch arguments when given (they win
    over --from-checkpoint, which is then not read), else the run described by the trainer's
    saved checkpoint (--from-checkpoint DIR; `step` picks the checkpoint), else the runbook
    rule."""
    if launch_args is not None:
        family = next(f for f in REGISTRY.values() if f.launch_option)
        if config is not None:
            raise ForensicsError(f"give --config or {family.launch_option}, not both")
        _say_ignored(from_checkpoint, family.launch_option)
        return family.launch_run(launch_args, config_from_dict)
    if config is not None:
        _say_ignored(from_checkpoint, "--config")
        return _load_whole(find_config(config))
    if from_checkpoint is not None:
        console = make_console(stderr=True, soft_wrap=True)
        return config_from_checkpoint(
            from_checkpoint, step, lambda line: console.print(line, markup=False)
        )
    return _load_whole(find_config(config))


def _load_whole(path: Path) -> RunConfig:
    """The config at `path`, unless its folder is a set a kill left mid-publish (a rebuild's
    rebuilt.yaml beside another run's data files)."""
    refuse_if_mid_publish(Path(path).parent, Path(path).name)
    return load_config(path)


def _say_ignored(from_checkpoint: Path | None, winner: str) -> None:
    if from_checkpoint is not None:
        make_console(stderr=True, soft_wrap=True).print(
            f"{winner} given: --from-checkpoint {from_checkpoint} is not read", markup=False
        )
