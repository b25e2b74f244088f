"""The Hugging Face `datasets` family (`format: hf`): local data files, map-style or streaming.

A file-based family: a block list that is whole files is rebuilt as the same file list without
them (`data_files.json`, what the training script hands `load_dataset`); a `save_to_disk`
folder is no file list and is not rebuilt.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from dataloaders.family_base import (
    Family,
    FileUnit,
    KeptFiles,
    RestartFile,
    data_without_resumes,
    listed_unit,
)
from dataloaders.hf import open_hf_replayer, record_shards
from dataloaders.hf.config import HFData


class HFFamily(Family):
    name: ClassVar[str] = "hf"
    config_model: ClassVar[type] = HFData
    restart = RestartFile("data_files.json", "the new data_files list", False)
    file_facet = "file"
    restart_note = (
        "give the training script data_files.json's list instead of the old one "
        "(load_dataset(FORMAT, data_files=LIST)). The HF Trainer's resume skips the first "
        "{skipped} batches of the new order, so iteration i >= {resume} is rebuilt.yaml's "
        "iteration i; a datasets state_dict of the old file list does not fit the new one "
        "(resume by skipping batches instead)"
    )

    def open(self, config: Any) -> Any:
        return open_hf_replayer(config)

    def file_units(self, config: Any, replayer: Any) -> list[FileUnit]:
        name = config.data.name
        return [
            listed_unit(replayer, name, "file", s.name, s.url or s.path) for s in replayer.shards
        ]

    def file_refusal(self, config: Any, replayer: Any) -> str | None:
        if config.data.path is not None:
            return (
                f"data.path {config.data.path} is a save_to_disk folder, not a file list; "
                "remove skip.json's block list with your own pipeline (restart with the skip "
                "flags, restart-*.flags, as the stopgap)"
            )
        if len({s.name for s in replayer.shards}) != len(replayer.shards):
            return "two data files share a name (the file facet)"
        return None

    def rebuilt_data(self, config: Any, files: KeptFiles) -> dict[str, Any]:
        data = data_without_resumes(config)
        paths = [u.path for u in files.kept[config.data.name]]
        data["files"] = [str(p) for p in paths]
        if config.data.shards is not None and not any(isinstance(p, str) for p in paths):
            data["shards"] = record_shards(paths)
        return data

    def restart_files(self, config: Any, files: KeptFiles) -> dict[str, str]:
        paths = [str(u.path) for u in files.kept[config.data.name]]
        return {self.restart.name: json.dumps(paths, indent=1) + "\n"}
