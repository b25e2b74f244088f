"""The run read back from what the trainer saved beside the weights: `--from-checkpoint DIR`.

Each loader family reads the save folders of its own trainers (`Family.recognises_save` and
`Family.saved_run`, dataloaders/family_base.py): which files a trainer keeps beside its weights, and
how they become a run config, is knowledge of that family's package. This module asks every
family of the registry whether the folder is its own, hands the folder to the one that says so,
and refuses in one line when none does or when two do (reading it as either would be a guess).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from dataloaders.families import REGISTRY, Family
from dataloaders.run_config import RunConfig, config_from_dict
from forensics.errors import ForensicsError


def families_saving(folder: Path) -> list[Family]:
    """The families that recognise `folder` (an existing directory) as their save folder."""
    return [family for family in REGISTRY.values() if family.recognises_save(folder)]


def holds_checkpoint(folder: Path) -> bool:
    """Whether the trainer has saved, under `folder`, what a run's description is read from.
    A watcher started beside a fresh run asks this when a spike is raised: before the first
    save there is neither a description nor a checkpoint to roll back to."""
    folder = Path(folder).expanduser()
    return folder.is_dir() and bool(families_saving(folder))


def config_from_checkpoint(
    folder: Path, step: int | None, say: Callable[[str], None] = print
) -> RunConfig:
    """The run config the trainer's files under `folder` describe; `say` gets what was read."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise ForensicsError(f"{folder}: --from-checkpoint directory not found")
    families = families_saving(folder)
    if not families:
        looked = "; ".join(
            f"{family.name}: {family.save_files}"
            for family in REGISTRY.values()
            if family.save_files
        )
        raise ForensicsError(
            f"{folder}: no checkpoint forensics can read in it (looked for {looked}); give "
            "the trainer's save folder, or --config"
        )
    if len(families) > 1:
        names = " and ".join(family.name for family in families)
        raise ForensicsError(
            f"{folder}: holds the save files of {names} at once; give one checkpoint folder "
            "of the run, or --config"
        )
    (family,) = families
    config = family.saved_run(folder, step, say, config_from_dict)
    return config.model_copy(update={"origin": f"--from-checkpoint {folder}"})


def step_of_skip_file(path: Path) -> int | None:
    """The spike step a skip.json was written for, so that `rebuild` and `check-skip` read the
    same checkpoint `spike --from-checkpoint` read (None when unreadable: the command's own
    reading of the file then says what is wrong)."""
    try:
        step = json.loads(Path(path).read_text(encoding="utf-8")).get("step")
    except (OSError, ValueError, AttributeError):
        return None
    return step if isinstance(step, int) and step > 0 else None
