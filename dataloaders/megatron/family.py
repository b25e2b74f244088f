"""The Megatron family (`format: megatron`): .bin/.idx datasets blended per data stage.

Its rebuild writes each blocked dataset again without the blocked documents (new .bin/.idx,
`forensics.rebuild.plan`), and the restart takes the new `--data-path` with the checkpoint pin;
Megatron-LM reads one `--data-path` per launch, so each later data stage is a launch of its own.
A Megatron-LM or Megatron-Bridge save folder is read back by saved_run.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from dataloaders.family_base import ConfigFromDict, Family, RestartFile
from dataloaders.megatron.config import MegatronData
from dataloaders.megatron.launch_args import config_from_megatron_args, split_megatron_args
from dataloaders.megatron.replayer import open_megatron_replayer
from dataloaders.megatron.saved_run import (
    TRACKER,
    config_from_megatron_save,
    is_megatron_save_folder,
)


class MegatronFamily(Family):
    name: ClassVar[str] = "megatron"
    config_model: ClassVar[type] = MegatronData
    restart = RestartFile(
        "restart-rebuilt.flags", "the checkpoint pin and the new --data-path", True
    )
    rebuilds_documents = True
    launch_per_stage = True
    save_files = f"iter_NNNNNNN/ checkpoints or {TRACKER}"
    launch_option = "--megatron-args"

    def open(self, config: Any) -> Any:
        return open_megatron_replayer(config)

    def stage_starts(self, data: Any) -> list[int]:
        return [s.start_iteration for s in data.data_stages]

    def flag_paths(self, data: Any) -> list[str]:
        return [str(s.prefix) for st in data.data_stages for s in st.blend]

    def recognises_save(self, folder: Path) -> bool:
        return is_megatron_save_folder(folder)

    def saved_run(
        self,
        folder: Path,
        step: int | None,
        say: Callable[[str], None],
        config_from_dict: ConfigFromDict,
    ) -> Any:
        return config_from_megatron_save(folder, step, say, config_from_dict)

    def launch_run(self, text: str, config_from_dict: ConfigFromDict) -> Any:
        return config_from_megatron_args(
            split_megatron_args(text), config_from_dict=config_from_dict
        )
