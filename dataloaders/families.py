"""The loader families forensics replays: one package each, listed once here.

Every question whose answer depends on the family (its config model, its replayer, its data
stages, its files, its rebuild and restart files) is a method or attribute of its `Family`
(`dataloaders.family_base`, which says why the answers live with the family). Replay, the spike
window, the skip plan's action and the rebuild look the family up here by the config's
`data.format`, and the run config's `data:` union is built from the families' config models
(`dataloaders.data_sections.DataConfig`). Adding a family is its package (with its `family.py`)
and one line in `_ALL`.
"""

from __future__ import annotations

from typing import Any

from dataloaders.errors import ConfigError
from dataloaders.family_base import Family, FileUnit, KeptFiles, RestartFile
from dataloaders.hf.family import HFFamily
from dataloaders.megatron.family import MegatronFamily
from dataloaders.mosaic.family import MosaicFamily
from dataloaders.olmo_core.family import OlmoCoreFamily
from dataloaders.torchtitan.family import TorchtitanFamily

_ALL: tuple[Family, ...] = (
    MegatronFamily(),
    HFFamily(),
    OlmoCoreFamily(),
    MosaicFamily(),
    TorchtitanFamily(),
)
REGISTRY: dict[str, Family] = {f.name: f for f in _ALL}
FAMILIES: tuple[str, ...] = tuple(REGISTRY)  # in the order every listing shows them
DEFAULT_FAMILY = REGISTRY[MegatronFamily.name]  # what a skip file that names no family used


def get_family(name: str) -> Family:
    """The family called `name` (a one-line error listing them when there is none)."""
    if name not in REGISTRY:
        raise ConfigError(f"unknown data.format {name!r}; known: {', '.join(FAMILIES)}")
    return REGISTRY[name]


def family_of(config: Any) -> Family:
    """The family of a run config (its `data.format`)."""
    return get_family(config.data.format)


__all__ = [
    "DEFAULT_FAMILY",
    "FAMILIES",
    "REGISTRY",
    "Family",
    "FileUnit",
    "KeptFiles",
    "RestartFile",
    "family_of",
    "get_family",
]
