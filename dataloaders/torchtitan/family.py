"""The torchtitan family (`format: torchtitan`): torchtitan 0.3.0's text dataloaders over local
files, one source or an interleaved mix (dataloaders/torchtitan/config.py).

A file-based family: a block list that is whole files is rebuilt as each source's file list
without them (`data_files.json`, what each source's loader in torchtitan's dataset table hands
`load_dataset`). torchtitan has no option to skip steps, so this rebuild, restarted from the
rollback checkpoint (`--checkpoint.load_step`), is the restart plan.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from dataloaders.errors import ForensicsError
from dataloaders.family_base import (
    ConfigFromDict,
    Family,
    FileUnit,
    KeptFiles,
    RestartFile,
    data_without_resumes,
    listed_unit,
)
from dataloaders.torchtitan import open_titan_replayer
from dataloaders.torchtitan.config import TorchtitanData
from dataloaders.torchtitan.state import resume_entry, step_folder


class TorchtitanFamily(Family):
    name: ClassVar[str] = "torchtitan"
    config_model: ClassVar[type] = TorchtitanData
    restart = RestartFile("data_files.json", "each source's new data_files list", False)
    file_facet = "file"
    pins_rollback = True  # load_rollback_checkpoint: the trainer's --checkpoint.load_step=R
    restart_note = (
        "give each source's loader in torchtitan's dataset table its data_files.json list "
        "(load_dataset(FORMAT, data_files=LIST)) and restart from the rollback checkpoint "
        "(--checkpoint.load_step={rollback}; torchtitan has no option to skip steps). Its "
        "dataloader state is restored into the new files: a map-style source skips as many "
        "documents of the new split as its sample_idx counts (text_datasets.py:112-116), a "
        "streaming one resumes at its saved file and row, so iteration i >= {resume} is not "
        "rebuilt.yaml's iteration i (to start the new files from their first document, add "
        "--checkpoint.exclude_from_loading=dataloader)"
    )

    save_files = "step-N/.metadata (DCP checkpoints, under checkpoint/ of the dump folder)"

    def recognises_save(self, folder: Path) -> bool:
        """A torchtitan dump, checkpoint or `step-N` folder: told from the folder names and the
        DCP `.metadata` file's presence alone (state.step_folder), nothing unpickled."""
        try:
            step_folder(folder, None)
        except ForensicsError:
            return False
        return True

    def saved_run(
        self,
        folder: Path,
        step: int | None,
        say: Callable[[str], None],
        config_from_dict: ConfigFromDict,
    ) -> Any:
        """Refused in one line: a torchtitan save names no data files (its datasets' loaders
        are code in its dataset table), so the run cannot be read back from it alone; the line
        gives the `data.resumes` entry the save does supply, its loader state checked readable."""
        entry = resume_entry(folder, step)
        raise ForensicsError(
            f"{folder}: a torchtitan save names no data files (its datasets are code in its "
            "dataset table); write a config with format: torchtitan (configs/"
            f"example-torchtitan.yaml) and resume from this save with data.resumes: "
            f"[{{iteration: {entry['iteration']}, checkpoint: {entry['checkpoint']}}}]"
        )

    def open(self, config: Any) -> Any:
        return open_titan_replayer(config)

    def file_units(self, config: Any, replayer: Any) -> list[FileUnit]:
        return [
            listed_unit(replayer, source.name, "file", shard.name, shard.path)
            for source in replayer.sources
            for shard in source.shards
        ]

    def file_refusal(self, config: Any, replayer: Any) -> str | None:
        names = [shard.name for source in replayer.sources for shard in source.shards]
        if len(set(names)) != len(names):
            return "two data files share a name (the file facet)"
        return None

    def rebuilt_data(self, config: Any, files: KeptFiles) -> dict[str, Any]:
        data = data_without_resumes(config)
        kept = []
        for source in data["sources"]:
            units = files.kept.get(source["name"], [])
            if units:
                source = {k: v for k, v in source.items() if k != "shards"}
                kept.append({**source, "files": [str(u.path) for u in units]})
        data["sources"] = kept
        if len(kept) == 1 and not config.data.interleaved:
            data["interleaved"] = False
        return data

    def restart_files(self, config: Any, files: KeptFiles) -> dict[str, str]:
        lists = {name: [str(u.path) for u in units] for name, units in files.kept.items() if units}
        return {self.restart.name: json.dumps(lists, indent=1) + "\n"}
