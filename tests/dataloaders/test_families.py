"""The loader-family registry: every `data:` model has exactly one family, named by its `format`,
and every family's replayer is a `Replayer` that declares its capabilities."""

from __future__ import annotations

import inspect
from typing import get_args

import pytest

from dataloaders.base import Replayer
from dataloaders.data_sections import DataConfig, data_model
from dataloaders.errors import ConfigError
from dataloaders.families import FAMILIES, REGISTRY, family_of, get_family
from forensics_testing.repo_paths import REPO_ROOT


def test_every_data_model_has_one_family_named_by_its_format():
    models = get_args(get_args(DataConfig)[0])
    assert sorted(m.__name__ for m in models) == sorted(
        f.config_model.__name__ for f in REGISTRY.values()
    )
    for family in REGISTRY.values():
        assert get_args(family.config_model.model_fields["format"].annotation) == (family.name,)
        assert data_model(family.name) is family.config_model
    assert data_model("parquet") is None


def test_unknown_family_is_one_line_listing_the_known_ones():
    with pytest.raises(ConfigError, match="unknown data.format 'webdataset'; known: megatron"):
        get_family("webdataset")
    assert list(FAMILIES)[0] == "megatron"


def test_each_family_rebuilds_one_way():
    """Documents (a new copy of each dataset) or whole files (a file facet), never both."""
    for family in REGISTRY.values():
        assert family.rebuilds_documents != (family.file_facet is not None), family.name
        assert family.restart.name and family.restart.holds
        if family.file_facet is not None:
            assert family.restart_note.format(resume=5, skipped=4, rollback=4)


@pytest.mark.parametrize("module", ["megatron", "hf", "olmo_core", "mosaic"])
def test_replayers_are_replayers(module):
    """Each family's replayer class subclasses the abstract base (no abstract method left)."""
    replayer_module = __import__(f"dataloaders.{module}.replayer", fromlist=["*"])
    classes = [
        c
        for _, c in inspect.getmembers(replayer_module, inspect.isclass)
        if c.__module__ == replayer_module.__name__ and c.__name__.endswith("Replayer")
    ]
    assert len(classes) == 1
    assert issubclass(classes[0], Replayer) and not inspect.isabstract(classes[0])


def test_family_of_a_config():
    from dataloaders.run_config import load_config

    config = load_config(REPO_ROOT / "configs" / "example-olmo-core.yaml")
    assert family_of(config).name == "olmo-core"
    assert family_of(config).stage_starts(config.data) == [1]
