"""The checkpoint side: open a Hugging Face causal LM and compute per-token losses.

torch and transformers are imported inside the functions that need them (never at module level),
so `forensics --help`, `replay`, `score` and `triage` stay light. `check_checkpoint` reads only
config.json and the file listing: the spike pipeline calls it before any work, so a wrong
directory costs nothing.

Three checkpoint families: a Hugging Face model directory (AutoModelForCausalLM); a Megatron
iteration directory, legacy or torch_dist at any tensor/pipeline parallelism (read on CPU by
forensics.rescore.megatron into a plain-torch GPT, forensics.rescore.gpt); an OLMo-core stepN
directory (forensics.rescore.olmo_core maps it onto transformers' Olmo2ForCausalLM). Anything the
readers cannot compute exactly is refused with the conversion to run (megatron.CONVERT_HINT).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from forensics.errors import ForensicsError

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
DTYPES = ("float32", "bfloat16", "float16")


def checkpoint_family(path: Path) -> str:
    """'hf' (config.json), 'megatron' (an iteration directory or root) or 'olmo-core' (a stepN
    directory or its model_and_optim/), from the file listing alone."""
    if (path / "config.json").is_file() and not (path / "model_and_optim").is_dir():
        return "hf"
    from forensics.rescore.megatron import megatron_kind
    from forensics.rescore.olmo_core import olmo_core_kind

    if olmo_core_kind(path) is not None:
        return "olmo-core"
    if megatron_kind(path) is not None:
        return "megatron"
    return "hf"


def check_checkpoint(path: Path | str) -> dict[str, Any]:
    """The checkpoint's config.json, after the checks that need no torch. One-line errors for:
    a missing directory, a Megatron checkpoint (names the conversion), no config.json, no
    weights, a config that is not a model's."""
    path = Path(path)
    if not path.is_dir():
        raise ForensicsError(f"{path}: --checkpoint must be a model directory (config.json + "
                             "safetensors)")  # fmt: skip
    family = checkpoint_family(path)
    if family == "megatron":
        from forensics.rescore.megatron import check_megatron

        return {"family": family, "format": check_megatron(path)}
    if family == "olmo-core":
        from forensics.rescore.olmo_core import check_olmo_core

        return {"family": family, **check_olmo_core(path)}
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ForensicsError(
            f"{path}: no config.json: not a Hugging Face model directory (config.json + "
            "model.safetensors, as save_pretrained writes)"
        )
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as err:
        raise ForensicsError(f"{config_file}: not readable JSON ({err})") from None
    if not isinstance(config, dict) or "model_type" not in config:
        raise ForensicsError(f"{config_file}: has no model_type: not a transformers model config")
    archs = config.get("architectures") or []
    causal = ("ForCausalLM", "LMHeadModel")
    if config.get("is_encoder_decoder") or (archs and not any(a.endswith(causal) for a in archs)):
        raise ForensicsError(
            f"{path}: a {config['model_type']!r} model ({', '.join(archs) or 'encoder-decoder'}) "
            "is not a causal language model (no ...ForCausalLM / ...LMHeadModel head); pass the "
            "pre-spike checkpoint of the model that was trained"
        )
    if not any((path / name).is_file() for name in WEIGHT_FILES):
        raise ForensicsError(
            f"{path}: no weights ({', '.join(WEIGHT_FILES)}); save the model with save_pretrained"
        )
    return config


def checkpoint_digest(path: Path | str) -> str:
    """sha256 over the checkpoint's config and weight files (names and contents): the cache key.

    Content, not mtime: a checkpoint copied elsewhere keeps its cached losses, a retrained one
    with the same name does not."""
    path = Path(path)
    digest = hashlib.sha256()
    if checkpoint_family(path) == "hf":
        files = sorted(
            p
            for p in path.iterdir()
            if p.is_file() and (p.name == "config.json" or p.suffix in (".safetensors", ".bin"))
        )
    else:  # Megatron / OLMo-core: every file of the checkpoint, in rank subdirectories too
        files = sorted(p for p in path.rglob("*") if p.is_file())
    for file in files:
        digest.update(str(file.relative_to(path)).encode() + b"\0")
        with open(file, "rb") as stream:
            for block in iter(lambda s=stream: s.read(1 << 22), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def load_causal_lm(path: Path | str, device: str = "cpu", dtype: str = "float32") -> Any:
    """The model, in eval mode on `device`. One-line errors for a non-causal-LM config, a bad
    device or dtype, or weights transformers cannot load."""
    path = Path(path)
    info = check_checkpoint(path)
    if dtype not in DTYPES:
        raise ForensicsError(f"--dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    if info.get("family") in ("megatron", "olmo-core"):
        return _load_framework(path, info["family"], device, dtype)
    try:
        import torch
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError as err:
        raise ForensicsError(
            f"rescoring needs torch and transformers ({err.name} is missing): pip install "
            "'forensics[embed]'"
        ) from None
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ForensicsError(f"--device {device}: no CUDA device is available here")
    transformers.logging.set_verbosity_error()
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
    except (ValueError, KeyError, OSError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ForensicsError(f"{path}: transformers cannot read its config ({first})") from None
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if config.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise ForensicsError(
            f"{path}: a {config.model_type!r} model is not a causal language model "
            "(AutoModelForCausalLM cannot load it); pass the pre-spike checkpoint of the "
            "model that was trained"
        )
    try:
        model = AutoModelForCausalLM.from_pretrained(
            path, local_files_only=True, dtype=getattr(torch, dtype)
        )
    except (ValueError, OSError, RuntimeError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ForensicsError(f"{path}: the weights do not load ({first})") from None
    return model.eval().to(device)


def _load_framework(path: Path, family: str, device: str, dtype: str) -> Any:
    """A Megatron or OLMo-core checkpoint, read on CPU without its framework's process group."""
    try:
        import torch
    except ImportError:
        raise ForensicsError("rescoring needs torch: pip install 'forensics[embed]'") from None
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ForensicsError(f"--device {device}: no CUDA device is available here")
    if family == "megatron":
        from forensics.rescore.megatron import load_megatron

        model = load_megatron(path, dtype)
    else:
        from forensics.rescore.olmo_core import load_olmo_core

        model = load_olmo_core(path, dtype)
    return model.eval().to(device)


def vocab_size(model: Any) -> int:
    """Rows of the model's output layer (the ids it can score)."""
    out = model.get_output_embeddings()
    if out is not None and hasattr(out, "weight"):
        return int(out.weight.shape[0])
    return int(model.config.vocab_size)


def check_vocab(model: Any, tokens: np.ndarray, where: str) -> None:
    """Refuse token ids the model has no row for (a checkpoint of another tokenizer)."""
    if tokens.size == 0:
        return
    top = int(tokens.max())
    size = vocab_size(model)
    if top >= size:
        raise ForensicsError(
            f"{where}: the checkpoint's vocabulary has {size:,} ids but the samples hold token id "
            f"{top:,}: this checkpoint was not trained with this run's tokenizer"
        )


def token_losses(
    model: Any,
    tokens: np.ndarray,
    *,
    batch_size: int = 8,
    device: str = "cpu",
    advance: Callable[[int], None] | None = None,
) -> np.ndarray:
    """float32[n, L]: loss of token t+1 given tokens 0..t, for every sample (L = length - 1).

    The model sees tokens[:, :-1] and is scored on tokens[:, 1:], as Megatron's GPTDataset
    splits a sample into tokens and labels. Cross-entropy in float32 whatever the model dtype.
    """
    import torch

    n, length = tokens.shape
    out = np.empty((n, length - 1), dtype=np.float32)
    with torch.inference_mode():
        for lo in range(0, n, batch_size):
            batch = torch.as_tensor(np.asarray(tokens[lo : lo + batch_size], dtype=np.int64))
            batch = batch.to(device)
            logits = model(input_ids=batch[:, :-1]).logits.float()
            loss = torch.nn.functional.cross_entropy(
                logits.transpose(1, 2), batch[:, 1:], reduction="none"
            )
            out[lo : lo + len(batch)] = loss.cpu().numpy()
            if advance is not None:
                advance(len(batch))
    return out


def grad_norms(
    model: Any,
    tokens: np.ndarray,
    *,
    device: str = "cpu",
    advance: Callable[[int], None] | None = None,
) -> np.ndarray:
    """float32[n]: the L2 norm of the gradient of each sample's mean loss over all parameters.

    One backward per sample (what the trainer's grad norm would be for a batch of that sample
    alone, before clipping). Slow: a backward costs about two forwards."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    out = np.empty(len(tokens), dtype=np.float32)
    for i in range(len(tokens)):
        ids = torch.as_tensor(np.asarray(tokens[i : i + 1], dtype=np.int64)).to(device)
        model.zero_grad(set_to_none=True)
        with torch.enable_grad():
            logits = model(input_ids=ids[:, :-1]).logits.float()
            loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:])
            loss.backward()
        sq = sum(float(p.grad.float().pow(2).sum()) for p in params if p.grad is not None)
        out[i] = sq**0.5
        if advance is not None:
            advance(1)
    model.zero_grad(set_to_none=True)
    return out
