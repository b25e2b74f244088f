"""The MosaicML streaming family (`format: mosaic-streaming`): StreamingDataset over local MDS
streams.

A file-based family whose files are shards inside stream folders: a block list that is whole
shards is rebuilt as a new folder per stream that loses some (its index.json lists the kept
shards, linked to the originals) and `streams.json`, each stream's new `local`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from dataloaders.family_base import (
    Family,
    FileUnit,
    KeptFiles,
    RestartFile,
    data_without_resumes,
    listed_unit,
)
from dataloaders.mosaic import open_mosaic_replayer
from dataloaders.mosaic.config import MosaicData
from dataloaders.mosaic.mds import INDEX

REBUILT_SUFFIX = "_rebuilt"  # a rebuilt stream's folder: <stream>_rebuilt/ in the output


class MosaicFamily(Family):
    name: ClassVar[str] = "mosaic-streaming"
    config_model: ClassVar[type] = MosaicData
    restart = RestartFile("streams.json", "each stream's new local folder", False)
    file_facet = "shard"
    restart_note = (
        "point each stream at its local in streams.json (remote none: the new folders link the "
        "kept shards of the original folders, which must stay). StreamingDataset resumes from "
        "the checkpoint's state at its sample_in_epoch of the new epoch order: in epoch 0 "
        "iteration i >= {resume} is rebuilt.yaml's iteration i; to replay the restart exactly, "
        "add the checkpoint's state as {{iteration: {resume}, state_file: ...}} to "
        "rebuilt.yaml's data.resumes"
    )

    def open(self, config: Any) -> Any:
        return open_mosaic_replayer(config)

    def file_units(self, config: Any, replayer: Any) -> list[FileUnit]:
        return [
            listed_unit(replayer, name, "shard", shard.path.name, shard.path)
            for name, stream in zip(replayer.names, replayer.streams, strict=True)
            for shard in stream.shards
        ]

    def rebuilt_folders(self, touched: set[str], out: Path) -> dict[str, Path]:
        return {name: out / f"{name}{REBUILT_SUFFIX}" for name in sorted(touched)}

    def rebuilt_data(self, config: Any, files: KeptFiles) -> dict[str, Any]:
        data = data_without_resumes(config)
        streams = []
        for spec, stream in zip(data["streams"], config.data.streams, strict=True):
            name = stream.display_name
            if name in files.emptied:
                continue
            if name in files.folders:
                spec |= {"local": str(files.folders[name])}
            streams.append(spec | {"name": name})
        data["streams"] = streams
        return data

    def restart_files(self, config: Any, files: KeptFiles) -> dict[str, str]:
        rows = []
        for spec in config.data.streams:
            name = spec.display_name
            if name in files.emptied:
                rows.append({"name": name, "dropped": True})
            else:
                local = files.folders.get(name, spec.local)
                rows.append({"name": name, "local": str(local), "remote": None})
        return {self.restart.name: json.dumps(rows, indent=1) + "\n"}

    def stage_folders(self, config: Any, files: KeptFiles, staging: Path) -> None:
        """Each rebuilt stream's folder: index.json listing its kept shards (the original
        entries, in order) and a link to each kept shard file."""
        for spec in config.data.streams:
            name = spec.display_name
            if name not in files.folders:
                continue
            index = json.loads((spec.local / INDEX).read_text())
            keep = {u.path.name for u in files.kept[name]}
            index["shards"] = [s for s in index["shards"] if s["raw_data"]["basename"] in keep]
            folder = staging / files.folders[name].name
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
