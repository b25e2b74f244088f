"""Rescoring from an OLMo-core checkpoint that ai2-olmo-core itself wrote, against its own forward.

tests/oracles/olmo_core_model.py (run in .venv-olmo, ai2-olmo-core 3.0.0) builds an OLMo 2-style
Transformer (reordered-norm blocks, QK-norm, GQA, SwiGLU, RoPE) on CPU, saves
`step10/model_and_optim/` with olmo_core.distributed.checkpoint.save_model_and_optim_state and the
experiment config as ConfigSaverCallback does, and records Transformer.forward's per-token losses.
Our reader (no olmo_core import) maps the weights onto transformers' Olmo2ForCausalLM; its
per-token losses must equal OLMo-core's to float32 tolerance.
"""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from forensics.errors import ForensicsError  # noqa: E402
from forensics.rescore import RescoreOptions  # noqa: E402
from forensics.rescore.checkpoint import load_causal_lm, token_losses  # noqa: E402
from forensics_testing.olmo_core_run import oracle_python  # noqa: E402
from forensics_testing.planted import plant_in_dcp_metadata  # noqa: E402
from forensics_testing.refusal import one_line_error  # noqa: E402
from forensics_testing.small_run import SMALL, cli  # noqa: E402

ORACLE = Path(__file__).resolve().parents[2] / "oracles" / "olmo_core_model.py"


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("olmo_core_ckpt")
    proc = subprocess.run(
        [str(oracle_python()), str(ORACLE), str(root)], capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


@pytest.mark.parametrize("sub", ["step10", "step10/model_and_optim"])
def test_losses_equal_olmo_core_forward(saved: Path, sub: str) -> None:
    model = load_causal_lm(saved / sub)
    assert type(model).__name__ == "Olmo2ForCausalLM"
    reference = np.load(saved / "losses.npy")
    ours = token_losses(model, np.load(saved / "tokens.npy"))
    assert ours.shape == reference.shape == (3, 16)
    np.testing.assert_allclose(ours, reference, rtol=0, atol=2e-5)
    assert reference.std() > 0.05  # perturbed norms: a swapped mapping would not match


def test_without_its_config_or_with_another_block_it_is_refused(saved: Path, tmp_path) -> None:
    step = tmp_path / "step10"
    (step / "model_and_optim").mkdir(parents=True)
    (step / "model_and_optim" / ".metadata").write_bytes(
        (saved / "step10" / "model_and_optim" / ".metadata").read_bytes()
    )
    with pytest.raises(ForensicsError, match="step10: an OLMo-core checkpoint without config.json"):
        RescoreOptions(checkpoint=step).check()
    config = json.loads((saved / "step10" / "config.json").read_text())
    config["model"]["block"]["name"] = "default"
    (step / "config.json").write_text(json.dumps(config))
    with pytest.raises(ForensicsError, match="block 'default'; only OLMo 2-style models"):
        RescoreOptions(checkpoint=step).check()


def _cli(command: str, run: Path, checkpoint: Path, out: Path) -> subprocess.CompletedProcess:
    """`forensics rescore|spike --checkpoint CHECKPOINT` on the small generated run."""
    common = ["--config", str(run / "forensics.yaml"), "--step", str(SMALL.spike_iteration),
              "--window", "10", "--checkpoint", str(checkpoint), "--quiet",
              "--out", str(out)]  # fmt: skip
    return cli(command, *common, *(["--embed-cap", "0"] if command == "spike" else []))


def test_planted_code_in_its_metadata_never_runs(saved: Path, small_run: Path, tmp_path) -> None:
    """OLMo-core's .metadata (its own _StorageInfo class) passes the gate as written; with one
    object planted whose unpickling would run code, rescore and spike refuse by name, in one
    line, before any work, and the code never runs."""
    step = tmp_path / "step10"
    shutil.copytree(saved / "step10", step)
    RescoreOptions(checkpoint=step).check()
    metadata = step / "model_and_optim" / ".metadata"
    marker = tmp_path / "MARKER"
    plant_in_dcp_metadata(metadata, marker)
    with pytest.raises(ForensicsError, match=f"{metadata}: holds a pickled posix.system"):
        load_causal_lm(step / "model_and_optim")
    for command in ("rescore", "spike"):
        proc = _cli(command, small_run, step, tmp_path / "out")
        one_line_error(proc, f"{metadata}: holds a pickled posix.system", "refusing to unpickle")
    assert not marker.exists(), "the planted code ran"
    assert not (tmp_path / "out").exists()


def test_a_metadata_that_is_not_a_metadata_is_one_line(saved: Path, small_run: Path, tmp_path):
    """A .metadata that unpickles (plain containers only) to something else: exit 2, one line."""
    step = tmp_path / "step10"
    shutil.copytree(saved / "step10", step)
    metadata = step / "model_and_optim" / ".metadata"
    metadata.write_bytes(pickle.dumps({"state_dict_metadata": {}}))
    proc = _cli("rescore", small_run, step, tmp_path / "out")
    one_line_error(proc, f"{metadata}: holds a dict, not a torch.distributed.checkpoint Metadata")
