"""A real loss spike caused by data, on CPU, with its causal control.

A byte-level GPT (vocabulary 256, 2 pre-LayerNorm blocks, width 128, 4 heads, context 128, batch
16; AdamW lr 3e-3, betas (0.9, 0.95), weight decay 0.1, no gradient clipping) trains on clean
English documentation: the docstrings of Python's standard library, read in sorted file order
(deterministic for one Python version). For each seed the run trains to step BURST_START - 1, then
branches from that exact state:
- burst: steps BURST_START..BURST_END get a batch of long repeated short n-grams (period 1-6
  bytes filling the whole sequence: the repeated-n-gram data OLMo 2 traced its spikes to);
- control: the same steps get the next clean batches instead (same seed, same order otherwise).
Both branches then continue on the same clean batches. The loss is measured every step on one fixed
held-out clean batch, so the curves compare the model, not the batches.

    python scripts/real_spike.py OUT [--seeds 0 1 2] [--steps 450]

Writes OUT/curves_seed{S}.csv (step, clean loss and grad norm of both branches) and
OUT/summary.json (per seed: clean loss before the burst, the burst branch's peak, the control's
peak, whether the spike held). A spike "holds" when the burst branch's clean loss peaks above 1.5x
its pre-burst value while the control's stays below 1.1x of it.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np
import torch

CTX, BATCH, WIDTH, HEADS, LAYERS = 128, 16, 128, 4, 2
LR, BETAS, WD = 3e-3, (0.9, 0.95), 0.1
BURST_START, BURST_END = 301, 320


def corpus() -> bytes:
    """Docstrings of the standard library, in sorted path order: clean English documentation."""
    return b"\n\n".join(docstrings())


def docstrings() -> list[bytes]:
    """The corpus's documents: each docstring over 80 characters, ASCII, in sorted path order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    parts = []
    for path in sorted(root.glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 80:
                    parts.append(doc)
    return [p.encode("ascii", "ignore") for p in parts]


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(WIDTH), torch.nn.LayerNorm(WIDTH)
        self.attn = torch.nn.MultiheadAttention(WIDTH, HEADS, batch_first=True)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.GELU(), torch.nn.Linear(4 * WIDTH, WIDTH)
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class ByteGPT(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok = torch.nn.Embedding(256, WIDTH)
        self.pos = torch.nn.Embedding(CTX, WIDTH)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = torch.nn.LayerNorm(WIDTH)
        self.head = torch.nn.Linear(WIDTH, 256, bias=False)
        self.register_buffer("mask", torch.ones(CTX, CTX, dtype=torch.bool).triu(1))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x, self.mask[: ids.shape[1], : ids.shape[1]])
        return self.head(self.ln(x))


def loss_of(model: ByteGPT, batch: torch.Tensor) -> torch.Tensor:
    logits = model(batch[:, :-1])
    return torch.nn.functional.cross_entropy(logits.reshape(-1, 256), batch[:, 1:].reshape(-1))


def clean_batch(data: np.ndarray, rng: np.random.Generator) -> torch.Tensor:
    starts = rng.integers(0, len(data) - CTX - 1, BATCH)
    return torch.as_tensor(np.stack([data[s : s + CTX + 1] for s in starts]).astype(np.int64))


def burst_batch(rng: np.random.Generator) -> torch.Tensor:
    """Long repeated n-grams: each row one random printable pattern of 1-6 bytes, repeated."""
    rows = []
    for _ in range(BATCH):
        period = int(rng.integers(1, 7))
        pattern = rng.integers(33, 127, period)
        rows.append(np.tile(pattern, (CTX + 1) // period + 1)[: CTX + 1])
    return torch.as_tensor(np.stack(rows).astype(np.int64))


def step(model: ByteGPT, opt: torch.optim.Optimizer, batch: torch.Tensor) -> float:
    opt.zero_grad(set_to_none=True)
    loss_of(model, batch).backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
    opt.step()
    return float(norm)


def branch(
    state: dict, data: np.ndarray, heldout: torch.Tensor, seed: int, steps: int, burst: bool
):  # noqa: ANN201, E501
    """Continue from `state` (after step BURST_START - 1) to `steps`: (clean losses, grad norms)."""
    model, opt = copy.deepcopy(state["model"]), None
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, weight_decay=WD)
    opt.load_state_dict(copy.deepcopy(state["opt"]))
    clean_rng = np.random.default_rng([seed, 1])  # the same clean order in both branches
    burst_rng = np.random.default_rng([seed, 2])
    losses, norms = [], []
    for s in range(BURST_START, steps + 1):
        batch = clean_batch(data, clean_rng)
        if burst and s <= BURST_END:
            batch = burst_batch(burst_rng)
        norms.append(step(model, opt, batch))
        with torch.no_grad():
            losses.append(float(loss_of(model, heldout)))
    return losses, norms


def run_seed(data: np.ndarray, heldout: torch.Tensor, seed: int, steps: int) -> dict:
    torch.manual_seed(seed)
    model = ByteGPT()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, weight_decay=WD)
    rng = np.random.default_rng([seed, 0])
    shared = []
    for _ in range(1, BURST_START):
        step(model, opt, clean_batch(data, rng))
        with torch.no_grad():
            shared.append(float(loss_of(model, heldout)))
    state = {"model": model, "opt": opt.state_dict()}
    burst, burst_norms = branch(state, data, heldout, seed, steps, burst=True)
    control, control_norms = branch(state, data, heldout, seed, steps, burst=False)
    before = shared[-1]
    return {
        "seed": seed,
        "shared": shared,
        "burst": burst,
        "control": control,
        "burst_norms": burst_norms,
        "control_norms": control_norms,
        "loss_before": before,
        "burst_peak": max(burst),
        "burst_peak_step": BURST_START + int(np.argmax(burst)),
        "control_peak": max(control),
        "burst_end": burst[-1],
        "control_end": control[-1],
        "held": max(burst) > 1.5 * before and max(control) < 1.1 * before,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=450)
    args = parser.parse_args()
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    text = np.frombuffer(corpus(), dtype=np.uint8)
    split = int(len(text) * 0.95)
    data, held = text[:split], text[split:]
    heldout = clean_batch(held, np.random.default_rng(12345))
    summary = []
    for seed in args.seeds:
        start = time.perf_counter()
        result = run_seed(data, heldout, seed, args.steps)
        result["wall_s"] = round(time.perf_counter() - start, 1)
        write_curves(args.out / f"curves_seed{seed}.csv", result)
        summary.append({k: v for k, v in result.items() if not isinstance(v, list)})
        print(json.dumps(summary[-1]), flush=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(
        f"spike held in {sum(r['held'] for r in summary)} of {len(summary)} seeds", file=sys.stderr
    )


def write_curves(path: Path, r: dict) -> None:
    lines = ["step,clean_loss_burst,clean_loss_control,grad_norm_burst,grad_norm_control"]
    for i, loss in enumerate(r["shared"], start=1):
        lines.append(f"{i},{loss:.5f},{loss:.5f},,")
    rows = zip(r["burst"], r["control"], r["burst_norms"], r["control_norms"], strict=True)
    for i, (b, c, nb, nc) in enumerate(rows, start=BURST_START):
        lines.append(f"{i},{b:.5f},{c:.5f},{nb:.4f},{nc:.4f}")
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
