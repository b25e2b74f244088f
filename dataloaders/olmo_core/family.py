"""The OLMo-core family (`format: olmo-core`): NumpyFSLDataset token files, per named source.

A file-based family: a block list that is whole token files is rebuilt as the same path list
without them, given to the experiment script as its `dataset.paths` override. A run with
`data.resumes` is not rebuilt: the file numbers of its doc_ids span its data stages. Its save
folder (`stepN/config.json`) is read back by saved_config.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from dataloaders.family_base import (
    ConfigFromDict,
    Family,
    FileUnit,
    KeptFiles,
    RestartFile,
    data_without_resumes,
    listed_unit,
)
from dataloaders.olmo_core import open_olmo_core_replayer
from dataloaders.olmo_core.config import OlmoCoreData
from dataloaders.olmo_core.saved_config import is_olmo_core_save_folder, saved_run_config


class OlmoCoreFamily(Family):
    name: ClassVar[str] = "olmo-core"
    config_model: ClassVar[type] = OlmoCoreData
    restart = RestartFile("restart-rebuilt.flags", "the new dataset.paths overrides", True)
    file_facet = "file"
    save_files = "stepN/config.json (OLMo-core's ConfigSaverCallback)"
    pins_rollback = True  # load_rollback_checkpoint: OLMo-core's pin is not a flag
    restart_note = (
        "load the rollback checkpoint (load_rollback_checkpoint) with restart-rebuilt.flags "
        "(the experiment script's overrides: the new dataset.paths, and "
        "ignore_fingerprint_mismatch since the checkpoint's data loader state holds the old "
        "dataset's fingerprint). The loader continues at the state's epoch and batch in the new "
        "order: in the first epoch iteration i >= {resume} is rebuilt.yaml's iteration i; to "
        "replay the restart exactly, add {{iteration: {resume}, state: <checkpoint "
        "{rollback}>/train/rank0.pt, sources: rebuilt.yaml's sources}} to the original "
        "config's data.resumes"
    )

    def recognises_save(self, folder: Path) -> bool:
        return is_olmo_core_save_folder(folder)

    def saved_run(
        self,
        folder: Path,
        step: int | None,
        say: Callable[[str], None],
        config_from_dict: ConfigFromDict,
    ) -> Any:
        return saved_run_config(folder, say, config_from_dict)

    def open(self, config: Any) -> Any:
        return open_olmo_core_replayer(config)

    def stage_starts(self, data: Any) -> list[int]:
        return list(data.stage_start_iterations)

    def file_units(self, config: Any, replayer: Any) -> list[FileUnit]:
        return [
            listed_unit(replayer, f.source, "file", str(f.path), f.path) for f in replayer.files
        ]

    def file_refusal(self, config: Any, replayer: Any) -> str | None:
        if config.data.resumes:
            return (
                f"an {self.name} run with data.resumes is not rebuilt (the file numbers of "
                "doc_ids span its data stages)"
            )
        return None

    def rebuilt_data(self, config: Any, files: KeptFiles) -> dict[str, Any]:
        data = data_without_resumes(config)
        # the kept files are named one by one: no mix, no globs (source_permutation_seed
        # stays: the experiment keeps it and reorders the new path list as the replay does)
        for key in ("mix", "mix_base_dir", "mix_file", "tokenizer_identifier", "expand_glob"):
            data.pop(key, None)
        data["sources"] = [
            {"name": name, "paths": [str(u.path) for u in units]}
            for name, units in files.kept.items()
            if units
        ]
        return data

    def restart_files(self, config: Any, files: KeptFiles) -> dict[str, str]:
        # the experiment script's overrides (one shell word each): NumpyFSLDatasetConfig.paths
        # is one list (the sources concatenated in order), and the data loader's state of the
        # rollback checkpoint holds the old dataset's fingerprint, refused unless told
        paths = [str(u.path) for units in files.kept.values() for u in units]
        words = [
            "--dataset.paths=" + json.dumps(paths, separators=(",", ":")),
            "--data_loader.ignore_fingerprint_mismatch=true",
        ]
        # OLMo-core refuses paths beside a mix, and would expand the literal paths as globs
        if config.data.mix is not None:
            words.append("--dataset.mix=null")
        if config.data.expand_glob:
            words.append("--dataset.expand_glob=false")
        return {self.restart.name: " ".join(words) + "\n"}
