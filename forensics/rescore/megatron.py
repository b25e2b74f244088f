"""Read a Megatron GPT checkpoint on CPU, without a GPU or a process group (forensics.rescore.gpt).

Two formats, both as Megatron-LM writes one iteration (megatron/training/checkpointing.py in
NVIDIA/Megatron-LM: `get_checkpoint_name`, `generate_state_dict`, `save_checkpoint`):
- legacy: `iter_NNNNNNN/mp_rank_TT[_PPP]/model_optim_rng.pt`, one torch.save per tensor- (TT) and
  pipeline- (PPP) parallel rank, holding `args` (the run's argparse Namespace) and `model`
  (GPTModel.state_dict_for_save_checkpoint(): local layer numbers, this rank's slice);
- torch_dist: `metadata.json` naming the backend, `common.pt` (args and the other non-tensor
  entries) and torch.distributed.checkpoint shards (`.metadata`, `__R_N.distcp`) holding every
  tensor at its global shape, layers stacked on a leading axis (megatron-core's
  `decoder.layers.*` sharded keys, TransformerEngine names: `linear_qkv.layer_norm_weight` is the
  input norm). Read with `torch.distributed.checkpoint.load(..., no_dist=True)`.
Every pickle here (each rank's file, common.pt, .metadata) is read through dataloaders.safe_pickle
with the globals Megatron's checkpoints hold and no others: nothing in a checkpoint runs.

What each legacy tensor-parallel slice is, and how it is merged (megatron-core 0.16.1,
tensor_parallel/layers.py): VocabParallelEmbedding and ColumnParallelLinear (output_layer,
linear_qkv, linear_fc1) are split on dim 0 (layers.py:195-266, 751-881), RowParallelLinear
(linear_proj, linear_fc2) on dim 1 (layers.py:1088-1205), their biases and every norm are
replicated; the gated fc1 of each rank holds [gate_r; linear_r], so the gates are concatenated,
then the linear halves (transformer/mlp.py:276-315, apply_swiglu_sharded_factory, which writes the
same [gate; linear] global layout to torch_dist). Pipeline stages are concatenated in rank order,
each stage's local layer numbers shifted by the layers before it.

The model's options come from the checkpoint's own `args` (Megatron-LM's argument names and, where
an argument is absent, megatron-core's TransformerConfig default); options this reader does not
compute (mixture of experts, QK-norm, RoPE scaling, ...) are refused by name, never guessed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, ClassVar

from dataloaders.safe_pickle import (
    check_torch_save,
    dcp_tensors,
    load_torch_save,
    megatron_globals,
    read_dcp_metadata,
)
from dataloaders.trainers import MEGATRON_OUTPUT, REGISTRY
from forensics.errors import ForensicsError
from forensics.rescore.gpt import GPTSpec, build_gpt
from forensics.rescore.reader import CheckpointReader

LEGACY_FILE = "model_optim_rng.pt"
# The trainer that writes this format names its checkpoint folders (`iter_NNNNNNN`).
_SAVER = next(t for t in REGISTRY.values() if t.output_format == MEGATRON_OUTPUT)
RANK_DIR = re.compile(r"^mp_rank_(\d{2})(?:_(\d{3}))?$")
# Megatron names (local and TransformerEngine layer specs) -> canonical names in gpt.build_gpt.
LAYER_NAMES = {
    "input_layernorm.weight": "qkv_norm.weight",
    "input_layernorm.bias": "qkv_norm.bias",
    "self_attention.linear_qkv.layer_norm_weight": "qkv_norm.weight",
    "self_attention.linear_qkv.layer_norm_bias": "qkv_norm.bias",
    "self_attention.linear_qkv.weight": "qkv.weight",
    "self_attention.linear_qkv.bias": "qkv.bias",
    "self_attention.linear_proj.weight": "proj.weight",
    "self_attention.linear_proj.bias": "proj.bias",
    "pre_mlp_layernorm.weight": "mlp_norm.weight",
    "pre_mlp_layernorm.bias": "mlp_norm.bias",
    "mlp.linear_fc1.layer_norm_weight": "mlp_norm.weight",
    "mlp.linear_fc1.layer_norm_bias": "mlp_norm.bias",
    "mlp.linear_fc1.weight": "fc1.weight",
    "mlp.linear_fc1.bias": "fc1.bias",
    "mlp.linear_fc2.weight": "fc2.weight",
    "mlp.linear_fc2.bias": "fc2.bias",
}
TOP_NAMES = {
    "embedding.word_embeddings.weight": "embedding.word_embeddings.weight",
    "embedding.position_embeddings.weight": "embedding.position_embeddings.weight",
    "decoder.final_layernorm.weight": "final_norm.weight",
    "decoder.final_layernorm.bias": "final_norm.bias",
    "output_layer.weight": "output_layer.weight",
}
SPLIT_DIM0 = (
    "embedding.word_embeddings.weight",
    "output_layer.weight",
    "qkv.weight",
    "qkv.bias",
    "fc1.weight",
    "fc1.bias",
)
SPLIT_DIM1 = ("proj.weight", "fc2.weight")
# args that change the arithmetic in ways this reader does not compute: (name, value it must have)
UNSUPPORTED = (
    ("num_experts", None),
    ("qk_layernorm", False),
    ("multi_latent_attention", False),
    ("apply_residual_connection_post_layernorm", False),
    ("layernorm_zero_centered_gamma", False),
    ("use_rope_scaling", False),
    ("rotary_interleaved", False),
    ("rotary_seq_len_interpolation_factor", None),
    ("attention_output_gate", False),
    ("softmax_type", "vanilla"),
    ("mtp_num_layers", None),
)

CONVERT_HINT = (
    "convert it to Hugging Face format first, e.g. with Megatron-Bridge: python "
    "examples/conversion/convert_checkpoints.py export --hf-model <HF model of the same "
    "architecture> --megatron-path DIR --hf-path OUT (or Megatron-LM tools/checkpoint/convert.py "
    "with an HF saver), then pass --checkpoint OUT"
)


REQUIRED = ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size")


def megatron_kind(path: Path) -> str | None:
    """'torch_dist' / 'legacy' for one Megatron iteration directory, 'root' for a checkpoint root
    (latest_checkpointed_iteration.txt + iter_*), else None."""
    if (path / "metadata.json").is_file() or any(path.glob("*.distcp")):
        return "torch_dist"
    if any(RANK_DIR.match(p.name) and (p / LEGACY_FILE).is_file() for p in path.glob("mp_rank_*")):
        return "legacy"
    tracked = (path / "latest_checkpointed_iteration.txt").is_file()
    if tracked or (path.is_dir() and _SAVER.checkpoints(path)):
        return "root"
    return None


def check_megatron(path: Path) -> str:
    """The kind of a Megatron iteration directory; refuses a checkpoint root (which iteration is
    the pre-spike one is the user's call, not the newest by default) and missing rank files."""
    kind = megatron_kind(path)
    if kind == "root":
        iters = [_SAVER.checkpoint_name(i) for i in _SAVER.checkpoints(path)]
        shown = ", ".join(iters[-3:]) or "none found"
        raise ForensicsError(
            f"{path}: a Megatron checkpoint root; pass the iteration directory of the checkpoint "
            f"before the spike, e.g. {path / (iters[-1] if iters else 'iter_NNNNNNN')} "
            f"(iterations here: {shown})"
        )
    if kind == "legacy":
        _legacy_files(path)
    if kind == "torch_dist":
        _check_torch_dist(path)
    return kind or ""


def _check_torch_dist(path: Path) -> None:
    """The files megatron-core's torch_dist save writes (serialization.py: save): metadata.json
    naming the backend, common.pt, and torch.distributed.checkpoint's .metadata."""
    try:
        meta = json.loads((path / "metadata.json").read_text())
        backend = meta.get("sharded_backend")
    except (OSError, ValueError, AttributeError):
        raise ForensicsError(
            f"{path / 'metadata.json'}: missing or not megatron-core's "
            "checkpoint metadata (JSON with sharded_backend)"
        ) from None
    if backend != "torch_dist":
        raise ForensicsError(
            f"{path}: a Megatron {backend!r} checkpoint; only torch_dist is "
            "read here (re-save it as torch_dist)"
        )
    for name in ("common.pt", ".metadata"):
        if not (path / name).is_file():
            raise ForensicsError(
                f"{path}: a Megatron torch_dist checkpoint without {name}: an incomplete copy"
            )


def check_pickles(path: Path, kind: str) -> None:
    """Every pickle of the checkpoint gated before any work (dataloaders.safe_pickle): each
    rank's torch.save file or common.pt holds only what Megatron's checkpoints hold, and the
    torch_dist .metadata unpickles with only torch.distributed.checkpoint's classes. A planted
    global is refused here, in one line, before the window is even replayed."""
    files = [path / "common.pt"] if kind == "torch_dist" else _legacy_files(path).values()
    for file in sorted(files):
        check_torch_save(file, megatron_globals(), "a Megatron checkpoint")
    if kind == "torch_dist":
        read_dcp_metadata(path / ".metadata")


def _legacy_files(path: Path) -> dict[tuple[int, int], Path]:
    """{(tp, pp): file}, refusing a grid with holes (a partial copy of the checkpoint)."""
    files: dict[tuple[int, int], Path] = {}
    for sub in path.iterdir():
        match = RANK_DIR.match(sub.name)
        if match and (sub / LEGACY_FILE).is_file():
            files[(int(match[1]), int(match[2] or 0))] = sub / LEGACY_FILE
    tps = {tp for tp, _ in files}
    pps = {pp for _, pp in files}
    missing = [(t, p) for t in range(len(tps)) for p in range(len(pps)) if (t, p) not in files]
    if missing or max(tps) != len(tps) - 1 or max(pps) != len(pps) - 1:
        raise ForensicsError(
            f"{path}: the mp_rank_* directories do not form a full tensor x pipeline grid "
            f"({len(files)} files, tensor ranks {sorted(tps)}, pipeline ranks {sorted(pps)}): "
            "copy every rank's model_optim_rng.pt"
        )
    return files


def _torch_load(file: Path) -> dict[str, Any]:
    """A file Megatron-LM wrote with torch.save, read with only the globals its checkpoints hold
    (`args` is an argparse Namespace with torch dtypes and megatron-core enums:
    dataloaders.safe_pickle.megatron_globals); anything else is refused unread."""
    state = load_torch_save(file, megatron_globals(), "a Megatron checkpoint")
    if not isinstance(state, dict):
        raise ForensicsError(f"{file}: not a Megatron checkpoint (a {type(state).__name__})")
    return state


def _args(state: dict[str, Any], where: Path) -> Any:
    args = state.get("args")
    if args is None:
        raise ForensicsError(
            f"{where}: no 'args' saved with the model (Megatron-LM saves the run's arguments in "
            "every checkpoint); cannot tell the model's shape and options"
        )
    return args


def spec_from_args(args: Any, where: Path, vocab_rows: int) -> GPTSpec:
    """The model's options from Megatron-LM's arguments, refusing what is not computed here."""
    get = vars(args).get
    for name, expected in UNSUPPORTED:
        value = get(name)
        if value not in (None, False, 0, expected):
            raise ForensicsError(
                f"{where}: the run sets --{name.replace('_', '-')} {value!r}, which this "
                f"rescorer does not compute; {CONVERT_HINT}"
            )
    missing = [n for n in REQUIRED if get(n) is None]
    if missing:
        raise ForensicsError(
            f"{where}: the saved args lack {', '.join(missing)}: not a Megatron-LM GPT checkpoint"
        )
    if get("use_legacy_models") or get("transformer_impl") not in (
        None,
        "local",
        "transformer_engine",
    ):
        raise ForensicsError(
            f"{where}: a legacy (non-megatron-core) Megatron model is not supported; {CONVERT_HINT}"
        )
    heads = int(args.num_attention_heads)
    hidden = int(args.hidden_size)
    groups = int(get("num_query_groups") or heads) if get("group_query_attention") else heads
    position = get("position_embedding_type") or "learned_absolute"
    if position not in ("learned_absolute", "rope", "none"):
        raise ForensicsError(f"{where}: position embedding {position!r} is not supported")
    if get("swiglu"):
        activation, gated = "silu", True
    else:
        activation = "squared_relu" if get("squared_relu") else "gelu"
        activation = "openai_gelu" if get("openai_gelu") else activation
        gated = False
    return GPTSpec(
        num_layers=int(args.num_layers),
        hidden_size=hidden,
        ffn_hidden_size=int(args.ffn_hidden_size),
        num_attention_heads=heads,
        num_query_groups=groups,
        kv_channels=int(get("kv_channels") or hidden // heads),
        vocab_rows=vocab_rows,
        normalization=get("normalization") or "LayerNorm",
        norm_epsilon=float(get("norm_epsilon", get("layernorm_epsilon", 1e-5)) or 1e-5),
        activation=activation,
        gated=gated,
        position_embedding_type=position,
        rotary_base=float(get("rotary_base") or 10000),
        rotary_percent=float(get("rotary_percent") or 1.0),
    )


def _canonical(name: str, layer_offset: int) -> str | None:
    """The canonical name of one Megatron state-dict entry (None: not a weight we use)."""
    if name in TOP_NAMES:
        return TOP_NAMES[name]
    match = re.match(r"^decoder\.layers\.(\d+)\.(.+)$", name)
    if match and match[2] in LAYER_NAMES:
        return f"layers.{int(match[1]) + layer_offset}.{LAYER_NAMES[match[2]]}"
    return None


def _merge_tp(name: str, shards: list[Any], gated: bool) -> Any:
    """One tensor from its tensor-parallel slices (see the module docstring for the rules)."""
    import torch

    if len(shards) == 1:
        return shards[0]
    kind = name.split(".", 2)[-1] if name.startswith("layers.") else name
    if kind in ("fc1.weight", "fc1.bias") and gated:
        halves = [torch.chunk(s, 2, dim=0) for s in shards]
        return torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim=0)
    if kind in SPLIT_DIM0:
        return torch.cat(shards, dim=0)
    if kind in SPLIT_DIM1:
        return torch.cat(shards, dim=1)
    return shards[0]  # replicated: norms, row-parallel biases, position embeddings


def _stage_layers(model: dict[str, Any]) -> int:
    numbers = {int(m[1]) for k in model if (m := re.match(r"^decoder\.layers\.(\d+)\.", k))}
    return max(numbers) + 1 if numbers else 0


def load_legacy(path: Path) -> tuple[Any, dict[str, Any]]:
    """(args, canonical float tensors) merged from every mp_rank_* file."""
    files = _legacy_files(path)
    n_tp = 1 + max(tp for tp, _ in files)
    n_pp = 1 + max(pp for _, pp in files)
    args, merged, offset = None, {}, 0
    for pp in range(n_pp):
        states = [_torch_load(files[(tp, pp)]) for tp in range(n_tp)]
        args = args or _args(states[0], files[(0, pp)])
        models = []
        for tp, state in enumerate(states):
            model = state.get("model")
            if not isinstance(model, dict):
                hint = " (virtual pipeline stages: model0, model1, ...)" * ("model0" in state)
                raise ForensicsError(
                    f"{files[(tp, pp)]}: no 'model' state dict{hint}; not supported"
                )
            if any(k.startswith("language_model.") for k in model):
                raise ForensicsError(
                    f"{files[(tp, pp)]}: a legacy (non-megatron-core) Megatron "
                    f"model; {CONVERT_HINT}"
                )
            models.append(model)
        gated = bool(vars(args).get("swiglu"))
        for key in models[0]:
            name = _canonical(key, offset)
            if name is None or not hasattr(models[0][key], "shape"):
                continue
            if name == "output_layer.weight" and name in merged:
                continue
            merged[name] = _merge_tp(name, [m[key] for m in models], gated).float()
        offset += _stage_layers(models[0])
    return args, merged


def load_torch_dist(path: Path) -> tuple[Any, dict[str, Any]]:
    """(args, canonical float tensors) from a torch_dist directory, no process group."""
    args = _args(_torch_load(path / "common.pt"), path / "common.pt")

    def wanted(key: str) -> bool:
        return _canonical(re.sub(r"^decoder\.layers\.", "decoder.layers.0.", key), 0) is not None

    merged = {}
    for key, tensor in dcp_tensors(path, wanted).items():
        if key.startswith("decoder.layers."):  # stacked: [num_layers, ...]
            for i in range(tensor.shape[0]):
                merged[_canonical(key.replace("layers.", f"layers.{i}.", 1), 0)] = tensor[i].float()
        else:
            merged[_canonical(key, 0)] = tensor.float()
    return args, merged


def load_megatron(path: Path, dtype: str) -> Any:
    """The model of one Megatron iteration directory as a forensics.rescore.gpt module."""
    import torch

    kind = check_megatron(path)
    args, weights = load_torch_dist(path) if kind == "torch_dist" else load_legacy(path)
    if "embedding.word_embeddings.weight" not in weights:
        raise ForensicsError(f"{path}: no embedding.word_embeddings.weight: not a GPT model")
    rows = int(weights["embedding.word_embeddings.weight"].shape[0])
    spec = spec_from_args(args, path, rows)
    _check_complete(spec, weights, path)
    cast = {k: v.to(getattr(torch, dtype)) for k, v in weights.items()}
    return build_gpt(spec, cast)


def _check_complete(spec: GPTSpec, weights: dict[str, Any], path: Path) -> None:
    """Every weight the forward needs is there (a missing pipeline stage or layer is refused)."""
    need = ["final_norm.weight"]
    if spec.position_embedding_type == "learned_absolute":
        need.append("embedding.position_embeddings.weight")
    for i in range(spec.num_layers):
        need += [f"layers.{i}.{n}.weight" for n in ("qkv_norm", "qkv", "proj", "mlp_norm", "fc1",
                                                     "fc2")]  # fmt: skip
    missing = [n for n in need if n not in weights]
    if missing:
        raise ForensicsError(
            f"{path}: the checkpoint lacks {len(missing)} weights the model "
            f"needs (args say {spec.num_layers} layers), e.g. {missing[0]}"
        )


class MegatronCheckpoint(CheckpointReader):
    """One Megatron iteration directory, legacy or torch_dist, at any tensor/pipeline
    parallelism; a checkpoint root is recognised, and refused with the iteration to pass."""

    kind: ClassVar[str] = MEGATRON_OUTPUT  # the trainer's own name for what it writes

    def recognises(self, path: Path) -> bool:
        return megatron_kind(path) is not None

    def check(self, path: Path) -> dict[str, Any]:
        kind = check_megatron(path)
        check_pickles(path, kind)
        return {"family": self.kind, "format": kind}

    def build(self, path: Path, dtype: str) -> Any:
        return load_megatron(path, dtype)
