"""Generated loss curves with a known answer, one per shape the triage must recognise.

Used by the tests and the benchmark (and handy to see what each verdict looks like). A healthy
run here is E + A * step^-alpha with noise that narrows as the loss falls, a grad norm around a
steady level and a warmup-then-cosine learning rate; each shape perturbs exactly one thing.
"""

from __future__ import annotations

import numpy as np
import polars as pl

SHAPES = (
    "healthy",
    "benign_spike",
    "malignant_step",
    "slow_benign",
    "divergence",
    "plateau_lr_floor",
    "plateau_repeated_data",
    "plateau_capacity",
)
SPIKE_STEP = 3000


def healthy(n: int, seed: int = 0, interval: int = 1) -> pl.DataFrame:
    """A clean run of `n` steps logged every `interval` steps."""
    rng = np.random.default_rng(seed)
    step = np.arange(interval, n + 1, interval, dtype=np.int64)
    base = 2.0 + 9.0 * step.astype(float) ** -0.35
    noise = rng.normal(0.0, 1.0, len(step)) * (0.01 + 0.08 * (base - 2.0) / 9.0)
    warm = np.minimum(step / 200.0, 1.0)
    lr = 3e-4 * warm * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * step / (2 * n))))
    grad = 0.3 * (1 + 0.1 * rng.standard_normal(len(step))).clip(0.5)
    return pl.DataFrame(
        {
            "step": step,
            "loss": base + noise,
            "grad_norm": grad,
            "lr": lr,
            "consumed_samples": (step * 512).astype(float),
            "global_batch_size": np.full(len(step), 512.0),
        }
    )


def make(shape: str, n: int = 6000, seed: int = 0) -> pl.DataFrame:
    """One curve of the named shape (see SHAPES); events sit at or after SPIKE_STEP."""
    df = healthy(n, seed)
    s = df["step"].to_numpy()
    loss = df["loss"].to_numpy().copy()
    grad = df["grad_norm"].to_numpy().copy()
    lr = df["lr"].to_numpy().copy()
    after = s >= SPIKE_STEP
    t = (s - SPIKE_STEP).astype(float)
    extra: dict[str, np.ndarray] = {}
    if shape == "benign_spike":  # +1.5 that is gone within ~20 steps; grad norm leads by 3
        loss += np.where(after, 1.5 * np.exp(-t / 5.0), 0.0)
        grad += np.where((s >= SPIKE_STEP - 3) & (s < SPIKE_STEP + 10), 5.0, 0.0)
    elif shape == "malignant_step":  # +1.2, settles at +0.6 for good
        loss += np.where(after, 0.6 + 0.6 * np.exp(-t / 20.0), 0.0)
    elif shape == "slow_benign":  # +1.0, climbs back over ~350 steps (inside the 500 window)
        loss += np.where(after, 1.0 * np.clip(1 - t / 350.0, 0, 1) ** 1.5, 0.0)
    elif shape == "divergence":  # grad norm explodes from 40 steps before, loss climbs to the end
        g0 = SPIKE_STEP - 40
        grad *= np.where(s >= g0, np.exp(np.minimum((s - g0) / 15.0, 8.0)), 1.0)
        loss += np.where(after, 0.004 * t, 0.0)
    elif shape.startswith("plateau"):
        # The loss stops falling at SPIKE_STEP and stays flat to the end.
        flat = 2.0 + 9.0 * SPIKE_STEP**-0.35
        noise = loss - (2.0 + 9.0 * s.astype(float) ** -0.35)
        loss = np.where(after, flat + noise, loss)
        if shape == "plateau_lr_floor":
            lr = np.where(after, lr.max() * 0.02, lr)
        else:
            lr = np.where(after, lr.max() * 0.8, lr)
        if shape == "plateau_repeated_data":
            extra["tokens"] = s * 512.0 * 2048
    elif shape != "healthy":
        raise ValueError(f"unknown shape {shape!r}; choose from {SHAPES}")
    out = df.with_columns(
        pl.Series("loss", loss), pl.Series("grad_norm", grad), pl.Series("lr", lr)
    )
    for name, values in extra.items():
        out = out.with_columns(pl.Series(name, values))
    return out


def plateau_level() -> float:
    """The loss at which the plateau shapes sit."""
    return 2.0 + 9.0 * SPIKE_STEP**-0.35


def megatron_lines(df: pl.DataFrame, prefix: str = "[default0]:", ms: bool = True) -> list[str]:
    """Render a table as Megatron-LM `training_log` lines (the format `read_log` must parse)."""
    unit = "(ms)" if ms else "(s)"
    t = 1234.5 if ms else 1.2345
    out = []
    total = int(df["step"].max())
    for row in df.iter_rows(named=True):
        fields = [
            f"consumed samples: {int(row.get('consumed_samples') or 0):12d}",
            f"elapsed time per iteration {unit}: {t}",
            f"learning rate: {row['lr']:.3E}",
            f"global batch size: {int(row.get('global_batch_size') or 0):5d}",
            f"lm loss: {row['loss']:.6E}",
            f"grad norm: {row['grad_norm']:.3f}",
            "number of skipped iterations:   0",
            "number of nan iterations:   0",
        ]
        out.append(f"{prefix} iteration {row['step']:8d}/{total:8d} | " + " | ".join(fields) + " |")
    return out
