"""The Megatron family (`format: megatron`): .bin/.idx datasets blended per data stage.

Its rebuild writes each blocked dataset again without the blocked documents (new .bin/.idx,
`forensics.rebuild.plan`), and the restart takes the new `--data-path` with the checkpoint pin;
Megatron-LM reads one `--data-path` per launch, so each later data stage is a launch of its own.
"""

from __future__ import annotations

from typing import Any, ClassVar

from dataloaders.data_sections import MegatronData
from dataloaders.family_base import Family, RestartFile
from dataloaders.megatron.replayer import open_megatron_replayer


class MegatronFamily(Family):
    name: ClassVar[str] = "megatron"
    config_model: ClassVar[type] = MegatronData
    restart = RestartFile(
        "restart-rebuilt.flags", "the checkpoint pin and the new --data-path", True
    )
    rebuilds_documents = True
    launch_per_stage = True

    def open(self, config: Any) -> Any:
        return open_megatron_replayer(config)

    def stage_starts(self, data: Any) -> list[int]:
        return [s.start_iteration for s in data.data_stages]

    def flag_paths(self, data: Any) -> list[str]:
        return [str(s.prefix) for st in data.data_stages for s in st.blend]
