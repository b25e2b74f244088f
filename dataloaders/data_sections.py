"""The run config's `data:` section: one model per loader family, each in its own package
(`dataloaders/<family>/config.py`), joined here into the union the `format:` field chooses from.
`dataloaders/run_config.py` has the whole config (training, resumes, checkpoints) and its loading;
`configs/example-*.yaml` document every field.
"""

from __future__ import annotations

from typing import Annotated, Any, get_args

from pydantic import Field

from dataloaders.config_base import DataSection
from dataloaders.hf.config import HFData
from dataloaders.megatron.config import MegatronData
from dataloaders.mosaic.config import MosaicData
from dataloaders.olmo_core.config import OlmoCoreData
from dataloaders.torchtitan.config import TorchtitanData

DataConfig = Annotated[
    MegatronData | HFData | OlmoCoreData | MosaicData | TorchtitanData,
    Field(discriminator="format"),
]


def data_model(fmt: Any) -> type[DataSection] | None:
    """The `data:` model whose `format` is `fmt` (None when no family has it)."""
    for model in get_args(get_args(DataConfig)[0]):
        if fmt in get_args(model.model_fields["format"].annotation):
            return model
    return None
