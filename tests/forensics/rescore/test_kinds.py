"""Which reader reads a --checkpoint directory: decided from the file listing alone, in the
registry's order, with Hugging Face's checks for a directory no reader recognises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forensics.errors import ForensicsError
from forensics.rescore.checkpoint import check_checkpoint
from forensics.rescore.kinds import KINDS, REGISTRY, reader_of


def _hf(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (path / "model.safetensors").write_bytes(b"w")
    return path


def test_each_listing_goes_to_its_reader(tmp_path: Path) -> None:
    assert reader_of(_hf(tmp_path / "hf")).kind == KINDS[0]
    step = tmp_path / "step10"  # OLMo-core: a config.json beside model_and_optim/
    (step / "model_and_optim").mkdir(parents=True)
    (step / "model_and_optim" / ".metadata").write_bytes(b"m")
    (step / "config.json").write_text("{}")
    assert reader_of(step) is reader_of(step / "model_and_optim")
    iteration = tmp_path / "iter_0000010"  # Megatron torch_dist
    iteration.mkdir()
    (iteration / "metadata.json").write_text("{}")
    kinds = {reader_of(p).kind for p in (tmp_path / "hf", step, iteration)}
    assert kinds == set(REGISTRY)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert reader_of(empty) is reader_of(tmp_path / "hf")  # read as HF: its checks say why not


def test_unrecognised_directory_is_refused_by_the_fallbacks_checks(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ForensicsError, match="no config.json: not a Hugging Face model"):
        check_checkpoint(tmp_path / "empty")
    assert check_checkpoint(_hf(tmp_path / "hf"))["model_type"] == "gpt2"
