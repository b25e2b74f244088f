"""The distilled model's directory is named by the source weights' content, not their path:
two checkouts (two virtualenvs) holding the same weights share one distillation."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("model2vec")


def test_the_same_weights_elsewhere_name_the_same_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from forensics.cluster.static_model import static_model_dir

    monkeypatch.setenv("FORENSICS_MODEL_DIR", str(tmp_path / "models"))
    first = tmp_path / "venv-a" / "minilm"
    first.mkdir(parents=True)
    (first / "model.safetensors").write_bytes(b"weights " * 1000)
    second = tmp_path / "venv-b" / "minilm"
    shutil.copytree(first, second)
    assert static_model_dir(first) == static_model_dir(second)
    (second / "model.safetensors").write_bytes(b"other weights " * 1000)
    assert static_model_dir(first) != static_model_dir(second)
