"""Read an OLMo-core checkpoint (`stepN/model_and_optim/`, torch distributed checkpoint format) on
CPU, without olmo_core installed, into transformers' Olmo2ForCausalLM.

The mapping is OLMo-core's own (ai2-olmo-core 3.0.0):
- weights: `OLMO_CORE_TO_HF_WEIGHT_MAPPINGS` (olmo_core/nn/hf/convert.py:183-205): embeddings ->
  model.embed_tokens, blocks.L.attention.w_q/w_k/w_v/w_out -> self_attn.q/k/v/o_proj,
  attention.q_norm/k_norm -> self_attn.q_norm/k_norm, feed_forward.w1/w2/w3 ->
  mlp.gate/down/up_proj,
  attention_norm -> post_attention_layernorm, feed_forward_norm -> post_feedforward_layernorm,
  lm_head.norm -> model.norm, lm_head.w_out -> lm_head;
- config: `get_hf_config` (olmo_core/nn/hf/config.py:748-808): an Olmo2Config with vocab_size,
  hidden_size = d_model, intermediate_size = the feed-forward hidden size, layers, heads, kv heads,
  silu, attention_bias, rope_theta, rms_norm_eps, tie_word_embeddings. Like get_hf_config, only the
  OLMo 2 block (`reordered_norm`, full-width QK-norm) maps; anything else is refused by name.

The model's config is read from `stepN/config.json`, the experiment config OLMo-core's
ConfigSaverCallback writes into every checkpoint (olmo_core/train/callbacks/config_saver.py);
its "model" entry is TransformerConfig.as_config_dict().

OLMo-core writes its `.metadata` with its own `_StorageInfo` class (relative_path, offset,
length: olmo_core/distributed/checkpoint/filesystem.py:56-62), the same fields torch's
FileSystemReader uses; dataloaders.safe_pickle reads it as torch's, and refuses any other global
the file names.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, ClassVar

from dataloaders.safe_pickle import dcp_tensors, read_dcp_metadata
from dataloaders.trainers import OLMO_CORE_OUTPUT
from forensics.errors import ForensicsError
from forensics.rescore.reader import CheckpointReader

WEIGHTS = {
    "embeddings.weight": "model.embed_tokens.weight",
    "lm_head.norm.weight": "model.norm.weight",
    "lm_head.w_out.weight": "lm_head.weight",
}
LAYER_WEIGHTS = {
    "attention.w_q.weight": "self_attn.q_proj.weight",
    "attention.w_k.weight": "self_attn.k_proj.weight",
    "attention.w_v.weight": "self_attn.v_proj.weight",
    "attention.w_out.weight": "self_attn.o_proj.weight",
    "attention.w_q.bias": "self_attn.q_proj.bias",
    "attention.w_k.bias": "self_attn.k_proj.bias",
    "attention.w_v.bias": "self_attn.v_proj.bias",
    "attention.w_out.bias": "self_attn.o_proj.bias",
    "attention.q_norm.weight": "self_attn.q_norm.weight",
    "attention.k_norm.weight": "self_attn.k_norm.weight",
    "feed_forward.w1.weight": "mlp.gate_proj.weight",
    "feed_forward.w2.weight": "mlp.down_proj.weight",
    "feed_forward.w3.weight": "mlp.up_proj.weight",
    "attention_norm.weight": "post_attention_layernorm.weight",
    "feed_forward_norm.weight": "post_feedforward_layernorm.weight",
}


def olmo_core_kind(path: Path) -> str | None:
    """'step' for stepN/ (holding model_and_optim/), 'model_and_optim' for that directory."""
    if (path / "model_and_optim" / ".metadata").is_file():
        return "step"
    if path.name == "model_and_optim" and (path / ".metadata").is_file():
        return "model_and_optim"
    return None


def _step_dir(path: Path) -> Path:
    return path.parent if olmo_core_kind(path) == "model_and_optim" else path


def _model_config(path: Path) -> dict[str, Any]:
    step = _step_dir(path)
    file = step / "config.json"
    try:
        config = json.loads(file.read_text())
    except OSError:
        raise ForensicsError(
            f"{step}: an OLMo-core checkpoint without config.json (the experiment config "
            "ConfigSaverCallback writes into every checkpoint); cannot tell the model's shape"
        ) from None
    except ValueError as err:
        raise ForensicsError(f"{file}: not readable JSON ({err})") from None
    model = config.get("model") if isinstance(config, dict) else None
    if not isinstance(model, dict) or "d_model" not in model:
        raise ForensicsError(
            f"{file}: no 'model' entry with d_model: not an OLMo-core TransformerConfig"
        )
    return model


def _refuse(where: Path, what: str) -> ForensicsError:
    return ForensicsError(
        f"{where}: {what}; only OLMo 2-style models (reordered_norm blocks, "
        "full-width QK-norm, RMSNorm, SwiGLU, RoPE) map to Olmo2ForCausalLM"
    )


def hf_config(model: dict[str, Any], where: Path) -> dict[str, Any]:
    """Olmo2Config keyword arguments for an OLMo-core TransformerConfig dict (get_hf_config)."""
    block = model.get("block") or {}
    attention = block.get("sequence_mixer") or block.get("attention") or {}
    norm, ff = block.get("layer_norm") or {}, block.get("feed_forward") or {}
    rope, qk_norm = attention.get("rope") or {}, attention.get("qk_norm") or {}
    checks = [
        (model.get("name", "default") == "default", f"model type {model.get('name')!r}"),
        (block.get("name") == "reordered_norm", f"block {block.get('name')!r}"),
        (attention.get("name", "default") == "default", f"attention {attention.get('name')!r}"),
        (bool(qk_norm) and not attention.get("use_head_qk_norm"), "no full-width QK-norm"),
        (not attention.get("scalable_softmax") and not attention.get("attention_sinks")
         and not attention.get("sliding_window"), "scalable softmax, sinks or sliding window"),
        (norm.get("name") == "rms" and qk_norm.get("name", "rms") == "rms", "a non-RMS norm"),
        (len({norm.get("eps"), qk_norm.get("eps")}) == 1, "QK-norm and block norm eps differ"),
        (ff.get("activation", "silu") == "silu" and not ff.get("bias"), "a non-SwiGLU MLP"),
        (bool(rope) and rope.get("name", "default") == "default"
         and rope.get("partial_rotary_factor", 1.0) == 1.0 and not rope.get("scaling"),
         "no RoPE, or scaled/partial RoPE"),
    ]  # fmt: skip
    for ok, what in checks:
        if not ok:
            raise _refuse(where, what)
    return {
        "vocab_size": int(model["vocab_size"]),
        "hidden_size": int(model["d_model"]),
        "intermediate_size": int(ff["hidden_size"]),
        "num_hidden_layers": int(model["n_layers"]),
        "num_attention_heads": int(attention["n_heads"]),
        "num_key_value_heads": int(attention.get("n_kv_heads") or attention["n_heads"]),
        "hidden_act": "silu",
        "attention_bias": bool(attention.get("bias")),
        "rope_theta": float(rope.get("theta", 500_000)),
        "rms_norm_eps": float(norm["eps"]),
        "tie_word_embeddings": bool(model.get("tie_word_embeddings")),
        "pad_token_id": None,
        "bos_token_id": None,
        "eos_token_id": None,
    }


def check_olmo_core(path: Path) -> dict[str, Any]:
    """Checks that need no torch: the config maps, the .metadata file is there."""
    return {"format": OlmoCoreCheckpoint.kind, "hf_config": hf_config(_model_config(path), path)}


def check_metadata(path: Path) -> None:
    """The .metadata unpickles with only torch.distributed.checkpoint's classes (and OLMo-core's
    _StorageInfo) and holds a Metadata: a planted global is refused before any work."""
    read_dcp_metadata(_step_dir(path) / "model_and_optim" / ".metadata")


def _hf_name(key: str) -> str | None:
    key = key.removeprefix("model.")
    if key in WEIGHTS:
        return WEIGHTS[key]
    match = re.match(r"^blocks\.(\d+)\.(.+)$", key)
    if match and match[2] in LAYER_WEIGHTS:
        return f"model.layers.{match[1]}.{LAYER_WEIGHTS[match[2]]}"
    return None


def load_olmo_core(path: Path, dtype: str) -> Any:
    """Olmo2ForCausalLM holding the checkpoint's model weights (optimizer state is not read)."""
    import torch
    from transformers import Olmo2Config, Olmo2ForCausalLM

    config = Olmo2Config(**check_olmo_core(path)["hf_config"])
    directory = _step_dir(path) / "model_and_optim"
    wanted = dcp_tensors(directory, lambda key: _hf_name(key) is not None)
    state = {_hf_name(k): v for k, v in wanted.items()}
    model = Olmo2ForCausalLM(config).to(getattr(torch, dtype))
    expected = set(model.state_dict())
    if config.tie_word_embeddings:
        expected.discard("lm_head.weight")
    missing = sorted(expected - set(state))
    if missing:
        raise ForensicsError(
            f"{directory}: lacks {len(missing)} of the model's weights, e.g. "
            f"{missing[0]} (a partial checkpoint?)"
        )
    model.load_state_dict(state, strict=False)
    return model.eval()


class OlmoCoreCheckpoint(CheckpointReader):
    """An OLMo-core `stepN/` directory (or its `model_and_optim/`), mapped onto transformers'
    Olmo2ForCausalLM."""

    kind: ClassVar[str] = OLMO_CORE_OUTPUT  # the trainer's own name for what it writes

    def recognises(self, path: Path) -> bool:
        return olmo_core_kind(path) is not None

    def check(self, path: Path) -> dict[str, Any]:
        checked = {"family": self.kind, **check_olmo_core(path)}
        check_metadata(path)
        return checked

    def build(self, path: Path, dtype: str) -> Any:
        return load_olmo_core(path, dtype)
