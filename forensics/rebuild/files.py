"""The rebuild of a file-based run (Hugging Face files, OLMo-core token files, MosaicML streams):
the block list is whole files (`forensics.skip.units`), so the rebuilt data is the same file list
without them. Nothing is rewritten: the rebuilt config lists the kept files (a stream that loses
shards gets a new directory whose index.json lists its kept shards, linked to the originals).

plan_files decides which files go; the run's family (`dataloaders.families`) words the rebuilt
config, the restart lines and the folders stage_files writes into the staging folder. A block
list that covers part of a file is refused here, before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dataloaders.families import family_of, get_family
from dataloaders.family_base import KeptFiles
from dataloaders.run_config import RunConfig
from forensics.errors import ForensicsError
from forensics.skip.plan import SkipPlan
from forensics.skip.units import FileUnit, coverage, file_units, refusal


@dataclass
class FilePlan:
    """The rebuild of one skip plan's block list over a file-based run.

    resume    first iteration the restart trains (the rollback checkpoint + 1)
    dropped   the files every document of which is blocked, in the run's order
    kept      dataset -> its remaining files, in the run's order (a dataset with none is gone)
    emptied   datasets (sources, streams) that lose every file: dropped from the run
    streams   dataset -> its new folder in --out (the family's rebuilt_folders: MosaicML
              streams that lose shards)
    restart   what the trainer is given instead of the old file list: a file name in --out ->
              its content (data_files.json, restart-rebuilt.flags, streams.json)
    """

    skip: SkipPlan
    fmt: str
    resume: int
    dropped: list[FileUnit]
    kept: dict[str, list[FileUnit]]
    emptied: list[str]
    streams: dict[str, Path] = field(default_factory=dict)
    restart: dict[str, str] = field(default_factory=dict)

    def counts(self) -> dict[str, dict[str, Any]]:
        """Per dataset that loses files: files and documents removed and kept."""
        out: dict[str, dict[str, Any]] = {}
        for unit in self.dropped:
            row = out.setdefault(unit.dataset, {"files_removed": [], "documents_removed": 0})
            row["files_removed"].append(str(unit.path))
            row["documents_removed"] += int(unit.doc_ids.size)
        for name, row in out.items():
            kept = self.kept.get(name, [])
            row["files_kept"] = len(kept)
            row["documents_kept"] = int(sum(u.doc_ids.size for u in kept))
            if name in self.streams:
                row["rebuilt"] = str(self.streams[name])
        return out


def plan_files(config: RunConfig, skip: SkipPlan, replayer: Any, out: Path) -> FilePlan:
    """Decide the files to drop, or refuse in one line (nothing is touched)."""
    blocked = {name: ids for name, ids in skip.documents.items() if ids}
    if not blocked:
        raise ForensicsError("the skip plan's block list is empty: there is nothing to rebuild")
    why = refusal(config, replayer, blocked)
    if why:
        raise ForensicsError(why)
    units = file_units(config, replayer)
    gone = {(u.dataset, u.path) for u in coverage(units, blocked).whole}
    kept: dict[str, list[FileUnit]] = {}
    for unit in units:
        kept.setdefault(unit.dataset, [])
        if (unit.dataset, unit.path) not in gone:
            kept[unit.dataset].append(unit)
    dropped = [u for u in units if (u.dataset, u.path) in gone]
    emptied = [name for name, left in kept.items() if not left]
    if len(emptied) == len(kept):
        raise ForensicsError(
            "forensics rebuild: the block list holds every file of the run: nothing would be "
            "left to train on; nothing was written"
        )
    resume = int(skip.rollback.get("resume_iteration") or skip.rollback["iteration"] + 1)
    family = family_of(config)
    plan = FilePlan(skip, family.name, resume, dropped, kept, emptied)
    plan.streams = family.rebuilt_folders({u.dataset for u in dropped} - set(emptied), out)
    plan.restart = restart_files(plan, config)
    return plan


def kept_files(plan: FilePlan) -> KeptFiles:
    """What the family's rebuild hooks read of the plan: the kept files, the emptied datasets
    and the new folders."""
    return KeptFiles(plan.kept, plan.emptied, plan.streams)


def rebuilt_data(config: RunConfig, plan: FilePlan) -> dict[str, Any]:
    """The `data` mapping of the rebuilt config: the file list without the dropped files, and
    without the original's restarts (the rebuilt config describes the new data from iteration 1
    on; the notes say how the restart continues in it)."""
    return get_family(plan.fmt).rebuilt_data(config, kept_files(plan))


def rebuilt_file_config(config: RunConfig, plan: FilePlan) -> dict[str, Any]:
    """The run config of the rebuilt run, as a mapping (absolute paths)."""
    raw = config.model_dump(mode="json", exclude={"source"}, exclude_none=True)
    raw["data"] = rebuilt_data(config, plan)
    name = raw.get("name") or "run"
    raw["name"] = f"{name}, rebuilt without the block list of spike {plan.skip.step}"
    if not raw["training"].get("applied_skips"):
        raw["training"].pop("applied_skips", None)
    return raw


def restart_files(plan: FilePlan, config: RunConfig) -> dict[str, str]:
    """The restart's new data lines, one file per family (content ends with a newline)."""
    return get_family(plan.fmt).restart_files(config, kept_files(plan))


def stage_files(plan: FilePlan, config: RunConfig, staging: Path) -> None:
    """Write the rebuilt folders (a MosaicML stream that loses shards: index.json of its kept
    shards, linked to the originals) into `staging`."""
    get_family(plan.fmt).stage_folders(config, kept_files(plan), staging)
