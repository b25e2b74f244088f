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


def test_dcp_metadata_from_torchs_writer_reads_and_planted_code_never_runs(tmp_path) -> None:
    """torch's own FileSystemWriter's .metadata reads as a Metadata; the same file with one
    object planted, or a payload pickled with any protocol (GLOBAL, STACK_GLOBAL, INST/REDUCE
    opcodes alike), is refused by the global's name and the code never runs."""
    import pickle
    import warnings

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import Metadata

    from dataloaders.safe_pickle import dcp_tensors, read_dcp_metadata
    from forensics_testing.planted import Payload, plant_in_dcp_metadata

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        writer = dcp.FileSystemWriter(str(tmp_path / "ckpt"))
        dcp.save({"w": torch.arange(6.0).reshape(2, 3), "step": 3}, storage_writer=writer,
                 no_dist=True)  # fmt: skip
    metadata = tmp_path / "ckpt" / ".metadata"
    assert isinstance(read_dcp_metadata(metadata), Metadata)
    loaded = dcp_tensors(tmp_path / "ckpt", lambda key: True)
    assert set(loaded) == {"w"} and loaded["w"].tolist() == [[0, 1, 2], [3, 4, 5]]
    shard = next((tmp_path / "ckpt").glob("*.distcp"))
    shard.rename(shard.with_suffix(".gone"))  # torch wraps the failure in a BaseException
    with pytest.raises(ForensicsError, match=f"the shards do not load .*{shard.name}"):
        dcp_tensors(tmp_path / "ckpt", lambda key: True)
    marker = tmp_path / "MARKER"
    plant_in_dcp_metadata(metadata, marker)
    with pytest.raises(ForensicsError, match=f"{metadata}: holds a pickled posix.system"):
        read_dcp_metadata(metadata)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        metadata.write_bytes(pickle.dumps({"x": [Payload(marker)]}, protocol=protocol))
        with pytest.raises(ForensicsError, match="holds a pickled posix.system"):
            read_dcp_metadata(metadata)
    assert not marker.exists(), "the planted code ran"


def test_a_torch_save_file_with_code_is_refused_unread(tmp_path) -> None:
    from dataloaders.safe_pickle import load_torch_save, megatron_globals
    from forensics_testing.planted import Payload

    path, marker = tmp_path / "model_optim_rng.pt", tmp_path / "MARKER"
    torch.save({"args": argparse.Namespace(x=1), "model": {"w": torch.ones(2)}}, path)
    assert load_torch_save(path, megatron_globals(), "a Megatron checkpoint")["args"].x == 1
    torch.save({"args": argparse.Namespace(x=1), "x": Payload(marker)}, path)
    with pytest.raises(ForensicsError, match=f"{path}: holds a pickled posix.system, which a Meg"):
        load_torch_save(path, megatron_globals(), "a Megatron checkpoint")
    assert not marker.exists()
