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
    scale = 1000.0 if ms else 1.0
    out = []
    total = int(df["step"].max())
    domains = [c for c in df.columns if c.startswith("loss:")]
    for row in df.iter_rows(named=True):
        t = (row.get("iteration_time_s") or 1.2345) * scale
        fields = [
            f"consumed samples: {int(row.get('consumed_samples') or 0):12d}",
            f"elapsed time per iteration {unit}: " + (f"{t:.1f}" if ms else f"{t:.4f}"),
            f"learning rate: {row['lr']:.3E}",
            f"global batch size: {int(row.get('global_batch_size') or 0):5d}",
            f"lm loss: {row['loss']:.6E}",
            *(f"lm loss {c.split(':', 1)[1]}: {row[c]:.6E}" for c in domains),
            *([f"loss scale: {row['loss_scale']:.1f}"] if "loss_scale" in row else []),
            f"grad norm: {row['grad_norm']:.3f}",
            "number of skipped iterations:   0",
            "number of nan iterations:   0",
        ]
        out.append(f"{prefix} iteration {row['step']:8d}/{total:8d} | " + " | ".join(fields) + " |")
    return out


# ----------------------------------------------------------------------------- the field's rules
# One log per rule of the field guide (../shared/notes/field-guide.md), each one a senior
# engineer reads at a glance. `rule_case(name)` returns the table; RULE_CASES says what each is.

RULE_CASES = {
    "off_trajectory": "an early spike that gets back to its old level, never to its trajectory",
    "lasting_step": "a clean lasting step after a spike: the data",
    "noisy_step": "a lasting step after which the loss is 3x noisier: a device",
    "domain_alone": "code's loss steps up at 3000, web and math do not: code's data",
    "domains_together": "every domain steps up at 3000 at once: numerics or the optimizer",
    "recurring": "eight benign spikes in 8,000 steps, each back within 30 steps",
    "lr_divergence": "no warmup: the loss runs away at peak lr with no grad-norm burst",
    "clip_divergence": "grad-norm bursts every 150 steps from 2000, then a runaway at 3000",
    "fp16_collapse": "the fp16 loss scale falls to 1 at 2000, grad norm 0, flat, then wanders",
    "slow_grad_rise": "the grad norm rises 10x over 2,000 steps before the loss climbs",
    "slow_climb": "from 4000 the loss climbs ~6% in 4,000 steps, below the divergence threshold",
    "timed_plateau": "a plateau from 3000 at 90 s per iteration: 3.1 days flat",
}
DOMAINS = ("code", "math", "web")


def _with(df: pl.DataFrame, **cols: np.ndarray) -> pl.DataFrame:
    return df.with_columns(pl.Series(k, v) for k, v in cols.items())


def rule_case(name: str, seed: int = 0) -> pl.DataFrame:
    """The generated log for one rule (see RULE_CASES)."""
    if name in ("domain_alone", "domains_together"):
        return _domains(name == "domains_together", seed)
    if name == "recurring":
        return _recurring(seed)
    if name in ("lr_divergence", "clip_divergence", "fp16_collapse", "slow_grad_rise"):
        return _runaway(name, seed)
    df = healthy(8000 if name == "slow_climb" else 6000, seed)
    s = df["step"].to_numpy()
    loss = df["loss"].to_numpy().copy()
    if name == "off_trajectory":  # +1.0 at 600, then the curve runs 0.16 above its old path
        t = np.clip(s - 600, 0, None).astype(float)
        loss += np.where(s >= 600, 0.16 + 1.0 * np.exp(-t / 20.0), 0.0)
    elif name in ("lasting_step", "noisy_step"):
        t = np.clip(s - SPIKE_STEP, 0, None).astype(float)
        loss += np.where(s >= SPIKE_STEP, 0.6 + 0.6 * np.exp(-t / 20.0), 0.0)
        if name == "noisy_step":
            rng = np.random.default_rng(seed + 7)
            loss += np.where(s >= SPIKE_STEP, rng.normal(0, 0.06, len(s)), 0.0)
    elif name == "slow_climb":  # from 4000 the loss climbs 5% of its level by 8000, steadily
        loss += np.where(s >= 4000, 0.25 * (s - 4000) / 4000.0, 0.0)
    elif name == "timed_plateau":
        df = make("plateau_capacity", 6000, seed)
        return _with(df, iteration_time_s=np.full(len(s), 90.0))
    else:
        raise ValueError(f"unknown rule case {name!r}; choose from {sorted(RULE_CASES)}")
    return _with(df, loss=loss)


def _domains(together: bool, seed: int) -> pl.DataFrame:
    """Per-domain losses around the total; code alone, or every domain, steps up at 3000."""
    df = healthy(6000, seed)
    s = df["step"].to_numpy()
    rng = np.random.default_rng(seed + 1)
    t = np.clip(s - SPIKE_STEP, 0, None).astype(float)
    step_up = np.where(s >= SPIKE_STEP, 0.6 + 0.6 * np.exp(-t / 20.0), 0.0)
    cols: dict[str, np.ndarray] = {}
    for k, d in enumerate(DOMAINS):
        own = df["loss"].to_numpy() + 0.2 * (k - 1) + rng.normal(0, 0.01, len(s))
        if together or d == "code":
            own = own + step_up
        cols[f"loss:{d}"] = own
    total = np.mean([cols[f"loss:{d}"] for d in DOMAINS], axis=0)
    return _with(df, loss=total, **cols)


def _recurring(seed: int) -> pl.DataFrame:
    """Eight benign spikes of +1.2 every 900 steps from 1000, each gone within ~30 steps."""
    df = healthy(8000, seed)
    s = df["step"].to_numpy()
    loss = df["loss"].to_numpy().copy()
    grad = df["grad_norm"].to_numpy().copy()
    for at in range(1000, 8000, 900):
        t = np.clip(s - at, 0, None).astype(float)
        loss += np.where(s >= at, 1.2 * np.exp(-t / 5.0), 0.0)
        grad += np.where((s >= at - 2) & (s < at + 5), 4.0, 0.0)
    return _with(df, loss=loss, grad_norm=grad, iteration_time_s=np.full(len(s), 20.0))


def _runaway(name: str, seed: int) -> pl.DataFrame:
    """Divergences by cause, each with the precursor the field guide names."""
    df = healthy(6000, seed)
    s = df["step"].to_numpy()
    loss = df["loss"].to_numpy().copy()
    grad = df["grad_norm"].to_numpy().copy()
    lr = df["lr"].to_numpy().copy()
    extra: dict[str, np.ndarray] = {}
    if name == "lr_divergence":  # no warmup, the peak lr from step 1; the loss runs away at 3000
        lr = np.full(len(s), 3e-3)
        loss += np.where(s >= SPIKE_STEP, 0.004 * (s - SPIKE_STEP), 0.0)
        grad *= np.where(s >= SPIKE_STEP, 1 + (s - SPIKE_STEP) / 1500.0, 1.0)
    elif name == "clip_divergence":  # 7 bursts of 100x from 2000, then the runaway at 3050
        for at in range(2000, 3050, 150):
            grad = np.where((s >= at) & (s < at + 3), 30.0, grad)
        loss += np.where(s >= 3050, 0.004 * (s - 3050), 0.0)
        grad *= np.where(s >= 3050, np.exp(np.minimum((s - 3050) / 30.0, 6.0)), 1.0)
    elif name == "fp16_collapse":  # scale 2^15 halves to 1 over 2000-2015; updates stop
        scale = np.maximum(32768.0 / 2.0 ** np.clip(s - 1999, 0, 15), 1.0)
        extra["loss_scale"] = scale
        grad = np.where(s >= 2016, 0.0, grad)
        frozen = loss[s == 1999][0]
        rng = np.random.default_rng(seed + 3)
        wander = np.cumsum(np.where(s >= 3600, rng.normal(0.002, 0.01, len(s)), 0.0))
        noise = loss - (2.0 + 9.0 * s.astype(float) ** -0.35)
        loss = np.where(s >= 2000, frozen + noise + wander, loss)
    elif name == "slow_grad_rise":  # 10x over 2000-4000 (exponential), the loss climbs from 4000
        grad *= np.where(s >= 2000, 10.0 ** (np.clip(s - 2000, 0, 2000) / 2000.0), 1.0)
        loss += np.where(s >= 4000, 0.003 * (s - 4000), 0.0)
    return _with(df, loss=loss, grad_norm=grad, lr=lr, **extra)
