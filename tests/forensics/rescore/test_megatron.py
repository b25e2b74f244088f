"""Rescoring from Megatron checkpoints that megatron-core itself wrote, against its own forward.

tests/oracles/megatron_gpt.py builds a tiny GPTModel with megatron-core 0.16.1 on CPU (local layer
spec, gloo ranks), saves it as Megatron-LM does in both formats at tensor-parallel size 2 (and, for
the first model, re-shards it with megatron-core's own loader onto 2 x 2 tensor x pipeline ranks
and saves that too), and records megatron-core's per-token losses (GPTModel.forward with labels)
on random tokens. Our loader reads every one of those checkpoints without a process group; the
per-token losses must equal megatron-core's to float32 tolerance.

Two models cover the options real runs use: RoPE (half the head rotated) + RMSNorm + SwiGLU +
grouped-query attention + untied output layer, no biases, over 2 x 2 tensor x pipeline ranks
(Llama-style); learned positions + LayerNorm + GeLU + biases + tied embeddings at TP 2 (GPT-2
style). Tied embeddings are not saved across pipeline stages here: megatron-core 0.16.1 moves the
shared output weight to CUDA when it sets it up (models/common/language_module/language_module.py:
244), which a CPU cannot run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")

from forensics.errors import ForensicsError  # noqa: E402
from forensics.rescore import RescoreOptions  # noqa: E402
from forensics.rescore.checkpoint import checkpoint_digest, load_causal_lm, token_losses  # noqa: E402
from forensics.rescore.megatron import load_megatron  # noqa: E402
from forensics_testing.planted import plant_in_dcp_metadata, plant_in_torch_save  # noqa: E402

ORACLE = Path(__file__).resolve().parents[2] / "oracles" / "megatron_gpt.py"
BASE = {
    "init_method_std": 0.05, "padded_vocab_size": 128, "vocab_size": 120,
    "max_position_embeddings": 32, "rotary_base": 10000, "rotary_percent": 1.0,
    "norm_epsilon": 1e-5,
    "kv_channels": None, "tensor_model_parallel_size": 2, "samples": 3, "seq_length": 16,
}  # fmt: skip
LLAMA = {
    **BASE, "num_layers": 2, "hidden_size": 64, "ffn_hidden_size": 96, "num_attention_heads": 4,
    "group_query_attention": True, "num_query_groups": 2, "swiglu": True,
    "normalization": "RMSNorm", "add_bias_linear": False, "add_qkv_bias": False,
    "position_embedding_type": "rope", "rotary_percent": 0.5,
    "untie_embeddings_and_output_weights": True, "pipeline_model_parallel_size": 2, "seed": 3,
}  # fmt: skip
GPT2 = {
    **BASE, "num_layers": 4, "hidden_size": 48, "ffn_hidden_size": 80, "num_attention_heads": 4,
    "group_query_attention": False, "num_query_groups": None, "swiglu": False,
    "normalization": "LayerNorm", "add_bias_linear": True, "add_qkv_bias": True,
    "position_embedding_type": "learned_absolute",
    "untie_embeddings_and_output_weights": False, "pipeline_model_parallel_size": 1, "seed": 5,
}  # fmt: skip
ITER = "iter_0000010"


def _oracle(root: Path, spec: dict) -> Path:
    proc = subprocess.run(
        [sys.executable, str(ORACLE), str(root), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    return _oracle(tmp_path_factory.mktemp("megatron_llama"), LLAMA)


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory) -> Path:
    return _oracle(tmp_path_factory.mktemp("megatron_gpt2"), GPT2)


def _check(root: Path, layout: str, ranks: int) -> None:
    ckpt = root / layout / ITER
    if layout.startswith("legacy"):
        assert len(list(ckpt.glob("mp_rank_*/model_optim_rng.pt"))) == ranks
    reference = np.load(root / "losses.npy")
    tokens = np.load(root / "tokens.npy")
    model = load_causal_lm(ckpt)  # the entry point spike --checkpoint uses
    ours = token_losses(model, tokens)
    assert ours.shape == reference.shape == (3, 16)
    np.testing.assert_allclose(ours, reference, rtol=0, atol=2e-5)
    # not trivially equal: a model with another seed's weights scores these tokens differently
    assert reference.std() > 0.05


@pytest.mark.parametrize(
    ("layout", "ranks"), [("legacy", 2), ("torch_dist", 0), ("legacy_pp", 4), ("torch_dist_pp", 0)]
)
def test_llama_style_tp2_pp2_losses_equal_megatron_core(
    llama: Path, layout: str, ranks: int
) -> None:
    _check(llama, layout, ranks)


@pytest.mark.parametrize("layout", ["legacy", "torch_dist"])
def test_gpt2_style_tp2_losses_equal_megatron_core(gpt2: Path, layout: str) -> None:
    _check(gpt2, layout, ranks=2)


def test_a_wrong_merge_would_be_caught(llama: Path) -> None:
    """The check has teeth: swapping the two tensor-parallel halves of one fc1 changes losses."""
    model = load_megatron(llama / "legacy" / ITER, "float32")
    key = "layers__0__fc1__weight"
    with torch.no_grad():
        w = model.params[key]
        w.copy_(torch.cat(torch.chunk(w, 4, dim=0)[::-1]))
    diff = np.abs(
        token_losses(model, np.load(llama / "tokens.npy")) - np.load(llama / "losses.npy")
    )
    assert diff.max() > 1e-3


def test_root_and_partial_checkpoints_are_refused(llama: Path, tmp_path: Path) -> None:
    for layout in ("legacy_pp", "torch_dist"):  # what spike --checkpoint checks up front
        RescoreOptions(checkpoint=llama / layout / ITER).check()
    with pytest.raises(ForensicsError, match=f"a Megatron checkpoint root; .*{ITER}"):
        load_causal_lm(llama / "legacy")
    partial = tmp_path / ITER
    (partial / "mp_rank_01").mkdir(parents=True)
    (partial / "mp_rank_01" / "model_optim_rng.pt").write_bytes(
        (llama / "legacy" / ITER / "mp_rank_01" / "model_optim_rng.pt").read_bytes()
    )
    with pytest.raises(ForensicsError, match="do not form a full tensor x pipeline grid"):
        load_causal_lm(partial)


def test_unsupported_options_are_refused_by_name(llama: Path, tmp_path: Path) -> None:
    ckpt = tmp_path / ITER / "mp_rank_00"
    ckpt.mkdir(parents=True)
    state = torch.load(
        llama / "legacy" / ITER / "mp_rank_00" / "model_optim_rng.pt", weights_only=False
    )
    state["args"].qk_layernorm = True
    torch.save(state, ckpt / "model_optim_rng.pt")
    with pytest.raises(ForensicsError, match="--qk-layernorm True, which this rescorer does not"):
        load_causal_lm(tmp_path / ITER)


def test_digest_covers_every_rank_file(llama: Path) -> None:
    first = checkpoint_digest(llama / "torch_dist" / ITER)
    assert first != checkpoint_digest(llama / "legacy" / ITER)
    assert first == checkpoint_digest(llama / "torch_dist" / ITER)


@pytest.mark.parametrize(
    ("layout", "name", "where"),
    [
        ("legacy", "mp_rank_01/model_optim_rng.pt", ("model", "decoder.layers.0._extra_state")),
        ("torch_dist", "common.pt", ("rng_state",)),
        ("torch_dist", ".metadata", None),
    ],
)
def test_planted_code_in_megatron_core_files_never_runs(
    gpt2: Path, tmp_path: Path, layout: str, name: str, where: tuple[str, ...] | None
) -> None:
    """The files megatron-core wrote (its torch_dist .metadata carries the saver's gathered
    plans: dist_checkpointing/strategies/state_dict_saver.py:144) pass the pickle gate as they
    are; with one object planted whose unpickling would run code, the check and the load refuse
    by name and the code never runs (the CLI side: test_planted_code.py)."""
    ckpt = tmp_path / ITER
    shutil.copytree(gpt2 / layout / ITER, ckpt)
    RescoreOptions(checkpoint=ckpt).check()
    marker = tmp_path / "MARKER"
    if where is None:
        plant_in_dcp_metadata(ckpt / name, marker)
    else:
        plant_in_torch_save(ckpt / name, marker, where)
    refusal = f"{ckpt / name}: holds a pickled posix.system, which"
    with pytest.raises(ForensicsError, match=refusal):
        RescoreOptions(checkpoint=ckpt).check()
    with pytest.raises(ForensicsError, match=refusal):
        load_megatron(ckpt, "float32")
    assert not marker.exists(), "the planted code ran"
