"""Train a tiny GPT-2-style model on CPU over a run's exact batch order (a real curve, not a
simulated one). Used by scripts/train_tiny_run.py and by the rescoring tests.

Why GPT-2 from transformers: it is the smallest causal LM every converter and trainer knows, its
checkpoints are the Hugging Face format `forensics rescore` loads, and at 2 layers x 64 wide it
trains a few hundred iterations on two CPU cores in a minute or two. The batches come from our
replay (`forensics.rescore.export.gather_tokens`), i.e. the samples Megatron would have fed in the
order it would have fed them; the loss is Megatron's (inputs = sample[:-1], labels = sample[1:]).
torch and transformers are imported inside the functions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from forensics.rescore.export import gather_tokens, sample_tables


@dataclass(frozen=True)
class TinyModel:
    """Shape of the tiny model (GPT-2 layout)."""

    n_layer: int = 2
    n_embd: int = 64
    n_head: int = 2
    seed: int = 0


def tiny_gpt2(vocab_size: int, seq_length: int, shape: TinyModel = TinyModel()) -> Any:
    """A randomly initialised GPT2LMHeadModel (seeded), dropout off (the loss is deterministic)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(shape.seed)
    config = GPT2Config(
        vocab_size=vocab_size,
        n_positions=seq_length,
        n_embd=shape.n_embd,
        n_layer=shape.n_layer,
        n_head=shape.n_head,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        tie_word_embeddings=True,
        bos_token_id=0,  # the demo tokenizer's <|endoftext|> (GPT-2's 50256 is out of range)
        eos_token_id=0,
    )
    return GPT2LMHeadModel(config)


def lr_at(iteration: int, total: int, peak: float, warmup: int) -> float:
    """Linear warmup, then cosine decay to 10% (Megatron's --lr-decay-style cosine shape)."""
    if iteration <= warmup:
        return peak * iteration / max(1, warmup)
    frac = (iteration - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def megatron_log_line(
    it: int, total: int, gbs: int, lr: float, loss: float, gnorm: float, ms: float
) -> str:
    """One Megatron-LM `training_log` line (megatron/training/training.py's format)."""
    return (
        f" iteration {it:8d}/{total:8d} | consumed samples: {it * gbs:12d} | elapsed time per "
        f"iteration (ms): {ms:.1f} | learning rate: {lr:.6E} | global batch size: {gbs:5d} | "
        f"lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: {gnorm:.3f} | number of skipped "
        "iterations:   0 | number of nan iterations:   0 |"
    )


def train(
    model: Any,
    batches: Iterator[tuple[int, np.ndarray]],
    *,
    total: int,
    peak_lr: float = 3e-3,
    warmup: int = 20,
    clip: float = 1.0,
    on_step: Callable[[int, float, float, float], None] | None = None,
    save_every: int = 0,
    save_dir: Path | None = None,
    lr_scale: Callable[[int], float] | None = None,
) -> list[tuple[int, float, float, float]]:
    """AdamW over `batches` ((iteration, tokens[gbs, L+1]) in order); returns (it, loss, grad
    norm before clipping, lr) per iteration. Saves `save_dir/iter_NNNNNNN/` (save_pretrained,
    safetensors) every `save_every` iterations. `lr_scale(iteration)` multiplies the schedule's
    learning rate (an optimizer-caused spike for the clean control: scripts/bench_controls.py)."""
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=peak_lr, betas=(0.9, 0.95), weight_decay=0.1)
    model.train()
    out = []
    for it, tokens in batches:
        lr = lr_at(it, total, peak_lr, warmup) * (lr_scale(it) if lr_scale is not None else 1.0)
        for group in opt.param_groups:
            group["lr"] = lr
        ids = torch.as_tensor(np.asarray(tokens, dtype=np.int64))
        logits = model(input_ids=ids[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip))
        opt.step()
        out.append((it, float(loss), gnorm, lr))
        if on_step is not None:
            on_step(it, float(loss), gnorm, lr)
        if save_every and save_dir is not None and it % save_every == 0:
            save(model, Path(save_dir) / f"iter_{it:07d}")
    model.eval()
    return out


def save(model: Any, folder: Path) -> Path:
    """save_pretrained (config.json + model.safetensors)."""
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def iteration_batches(
    replayer: Any, first: int, last: int, chunk: int = 50
) -> Iterator[tuple[int, np.ndarray]]:
    """(iteration, tokens[gbs, seq_length + 1]) for first..last, replayed `chunk` at a time."""
    for lo in range(first, last + 1, chunk):
        hi = min(last, lo + chunk - 1)
        samples, segments = sample_tables(replayer.replay(lo, hi, progress=False))
        tokens = gather_tokens(replayer, segments)
        its = samples.sort("row")["iteration"].to_numpy()  # rows run in (iteration, position)
        for it in range(lo, hi + 1):
            yield it, tokens[its == it]
