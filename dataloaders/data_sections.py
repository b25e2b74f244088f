"""The run config's `data:` section: one model per loader family, each in its own package
(`dataloaders/<family>/config.py`) and named by its `Family.config_model`, joined here into the
union the `format:` field chooses from, in the registry's order (`dataloaders/families.py`), so
a new family joins it by its registry line alone. `dataloaders/run_config.py` has the whole
config (training, resumes, checkpoints) and its loading; `configs/example-*.yaml` document
every field.
"""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import Field

from dataloaders.config_base import DataSection
from dataloaders.families import REGISTRY

_MODELS: tuple[type[DataSection], ...] = tuple(f.config_model for f in REGISTRY.values())

# `Union` of a tuple is the union of its members (`X | Y` has no form for a tuple); the
# discriminator makes pydantic pick the model by `format` and name it in every error.
DataConfig = Annotated[Union[_MODELS], Field(discriminator="format")]  # noqa: UP007


def data_model(fmt: Any) -> type[DataSection] | None:
    """The `data:` model whose `format` is `fmt` (None when no family has it)."""
    family = REGISTRY.get(fmt) if isinstance(fmt, str) else None
    return family.config_model if family is not None else None
