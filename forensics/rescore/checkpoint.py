"""The checkpoint side: open a Hugging Face causal LM and compute per-token losses.

torch and transformers are imported inside the functions that need them (never at module level),
so `forensics --help`, `replay`, `score` and `triage` stay light. `check_checkpoint` reads the
config, the file listing and, without running anything, the names every pickle of the checkpoint
holds (dataloaders.safe_pickle): the spike pipeline calls it before any work, so a wrong or
tampered directory costs nothing.

Each kind of checkpoint directory has its reader (`forensics.rescore.kinds`): a Hugging Face
model directory (forensics.rescore.hf, AutoModelForCausalLM); a Megatron iteration directory,
legacy or torch_dist at any tensor/pipeline parallelism (read on CPU by
forensics.rescore.megatron into a plain-torch GPT, forensics.rescore.gpt); an OLMo-core stepN
directory (forensics.rescore.olmo_core maps it onto transformers' Olmo2ForCausalLM). Anything the
readers cannot compute exactly is refused with the conversion to run (megatron.CONVERT_HINT).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from forensics.errors import ForensicsError
from forensics.rescore.kinds import reader_of

DTYPES = ("float32", "bfloat16", "float16")


def check_checkpoint(path: Path | str) -> dict[str, Any]:
    """What the checkpoint says about its model, after the checks run before any work. One-line
    errors for: a missing directory, and what its kind's reader refuses (a Megatron checkpoint
    root, no config.json, no weights, a config that is not a causal language model's)."""
    path = Path(path)
    if not path.is_dir():
        raise ForensicsError(f"{path}: --checkpoint must be a model directory (config.json + "
                             "safetensors)")  # fmt: skip
    return reader_of(path).check(path)


def checkpoint_digest(path: Path | str) -> str:
    """sha256 over the checkpoint's files (names and contents, `CheckpointReader.content_files`):
    the cache key.

    Content, not mtime: a checkpoint copied elsewhere keeps its cached losses, a retrained one
    with the same name does not."""
    path = Path(path)
    digest = hashlib.sha256()
    for file in reader_of(path).content_files(path):
        digest.update(str(file.relative_to(path)).encode() + b"\0")
        with open(file, "rb") as stream:
            for block in iter(lambda s=stream: s.read(1 << 22), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def load_causal_lm(path: Path | str, device: str = "cpu", dtype: str = "float32") -> Any:
    """The model, in eval mode on `device`. One-line errors for a non-causal-LM config, a bad
    device or dtype, or weights its reader cannot load."""
    path = Path(path)
    check_checkpoint(path)
    if dtype not in DTYPES:
        raise ForensicsError(f"--dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    return reader_of(path).load(path, device, dtype)


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
