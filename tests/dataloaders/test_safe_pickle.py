"""The gate on pickled globals does not move with what the process registered: megatron-core,
once imported, registers argparse.Namespace (and more) with torch's add_safe_globals, and
torch's own get_unsafe_globals_in_checkpoint then stops naming it."""

from __future__ import annotations

import argparse

import pytest
import torch

from dataloaders.errors import ForensicsError
from dataloaders.olmo_core.state import load_trainer_state
from dataloaders.safe_pickle import globals_beyond_torch_defaults


@pytest.fixture
def namespace_registered():
    before = torch.serialization.get_safe_globals()
    torch.serialization.add_safe_globals([argparse.Namespace])
    try:
        yield
    finally:
        torch.serialization.clear_safe_globals()
        torch.serialization.add_safe_globals(before)


def test_a_registered_global_is_still_named(tmp_path, namespace_registered) -> None:
    path = tmp_path / "rank0.pt"
    torch.save({"data_loader": {}, "extra": argparse.Namespace(x=1)}, path)
    assert torch.serialization.get_unsafe_globals_in_checkpoint(str(path)) == []
    assert globals_beyond_torch_defaults(path) == {"argparse.Namespace"}
    refusal = "holds a pickled argparse.Namespace, which an OLMo-core trainer state never"
    with pytest.raises(ForensicsError, match=refusal):
        load_trainer_state(path)


def test_plain_tensors_need_nothing(tmp_path) -> None:
    path = tmp_path / "t.pt"
    torch.save({"w": torch.ones(3), "step": 4}, path)
    assert globals_beyond_torch_defaults(path) == set()
