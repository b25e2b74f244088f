"""The rebuild of a file-based run (Hugging Face files, OLMo-core token files, MosaicML streams):
the block list is whole files (`forensics.skip.units`), so the rebuilt data is the same file list
without them. Nothing is rewritten: the rebuilt config lists the kept files (a stream that loses
shards gets a new directory whose index.json lists its kept shards, linked to the originals).

plan_files decides (which files go, the rebuilt config, the restart lines); stage_files writes
the stream directories into the staging folder. A block list that covers part of a file is
refused here, before anything is written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dataloaders.config import RunConfig
from forensics.errors import ForensicsError
from forensics.skip.plan import SkipPlan
from forensics.skip.units import FileUnit, coverage, file_units, refusal

REBUILT_SUFFIX = "_rebuilt"  # a rebuilt stream's folder: <stream>_rebuilt/ in --out


@dataclass
class FilePlan:
    """The rebuild of one skip plan's block list over a file-based run.

    resume    first iteration the restart trains (the rollback checkpoint + 1)
    dropped   the files every document of which is blocked, in the run's order
    kept      dataset -> its remaining files, in the run's order (a dataset with none is gone)
    emptied   datasets (sources, streams) that lose every file: dropped from the run
    streams   stream name -> its new folder in --out (MosaicML streams that lose shards)
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
    plan = FilePlan(skip, config.data.format, resume, dropped, kept, emptied)
    if plan.fmt == "mosaic-streaming":
        touched = {u.dataset for u in dropped} - set(emptied)
        plan.streams = {name: out / f"{name}{REBUILT_SUFFIX}" for name in sorted(touched)}
    plan.restart = restart_files(plan, config)
    return plan


def rebuilt_data(config: RunConfig, plan: FilePlan) -> dict[str, Any]:
    """The `data` mapping of the rebuilt config: the file list without the dropped files, and
    without the original's restarts (the rebuilt config describes the new data from iteration 1
    on; the notes say how the restart continues in it)."""
    data = config.data.model_dump(mode="json", exclude_none=True)
    data.pop("resumes", None)
    if plan.fmt == "hf":
        paths = [u.path for u in plan.kept[config.data.name]]
        data["files"] = [str(p) for p in paths]
        if config.data.shards is not None:
            from dataloaders.hf import record_shards

            data["shards"] = record_shards(paths)
    elif plan.fmt == "olmo-core":
        # the kept files are named one by one: no mix, no globs (source_permutation_seed
        # stays: the experiment keeps it and reorders the new path list as the replay does)
        for key in ("mix", "mix_base_dir", "mix_file", "tokenizer_identifier", "expand_glob"):
            data.pop(key, None)
        data["sources"] = [
            {"name": name, "paths": [str(u.path) for u in units]}
            for name, units in plan.kept.items()
            if units
        ]
    else:
        streams = []
        for spec, stream in zip(data["streams"], config.data.streams, strict=True):
            name = stream.display_name
            if name in plan.emptied:
                continue
            if name in plan.streams:
                spec |= {"local": str(plan.streams[name])}
            streams.append(spec | {"name": name})
        data["streams"] = streams
    return data


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
    if plan.fmt == "hf":
        files = [str(u.path) for u in plan.kept[config.data.name]]
        return {"data_files.json": json.dumps(files, indent=1) + "\n"}
    if plan.fmt == "olmo-core":
        # the experiment script's overrides (one shell word each): NumpyFSLDatasetConfig.paths
        # is one list (the sources concatenated in order), and the data loader's state of the
        # rollback checkpoint holds the old dataset's fingerprint, refused unless told
        paths = [str(u.path) for units in plan.kept.values() for u in units]
        words = [
            "--dataset.paths=" + json.dumps(paths, separators=(",", ":")),
            "--data_loader.ignore_fingerprint_mismatch=true",
        ]
        # OLMo-core refuses paths beside a mix, and would expand the literal paths as globs
        if config.data.mix is not None:
            words.append("--dataset.mix=null")
        if config.data.expand_glob:
            words.append("--dataset.expand_glob=false")
        return {"restart-rebuilt.flags": " ".join(words) + "\n"}
    rows = []
    for spec in config.data.streams:
        name = spec.display_name
        if name in plan.emptied:
            rows.append({"name": name, "dropped": True})
        else:
            local = plan.streams.get(name, spec.local)
            rows.append({"name": name, "local": str(local), "remote": None})
    return {"streams.json": json.dumps(rows, indent=1) + "\n"}


def stage_files(plan: FilePlan, config: RunConfig, staging: Path) -> None:
    """Write each rebuilt stream's folder into `staging`: index.json listing its kept shards (the
    original entries, in order) and a link to each kept shard file."""
    from dataloaders.mosaic.mds import INDEX

    for spec in config.data.streams if plan.fmt == "mosaic-streaming" else []:
        name = spec.display_name
        if name not in plan.streams:
            continue
        index = json.loads((spec.local / INDEX).read_text())
        keep = {u.path.name for u in plan.kept[name]}
        index["shards"] = [s for s in index["shards"] if s["raw_data"]["basename"] in keep]
        folder = staging / plan.streams[name].name
        folder.mkdir()
        for shard in index["shards"]:
            # the raw shard, and its compressed file where there is one (a shard kept only
            # compressed is read from it, by the replay and by streaming alike)
            zipped = (shard.get("zip_data") or {}).get("basename")
            for basename in (shard["raw_data"]["basename"], zipped):
                if basename and (spec.local / basename).is_file():
                    (folder / basename).parent.mkdir(parents=True, exist_ok=True)
                    (folder / basename).symlink_to((spec.local / basename).resolve())
        (folder / INDEX).write_text(json.dumps(index, indent=1) + "\n")
