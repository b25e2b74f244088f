"""Every threshold of the triage in one place, with the reason for its default.

The defaults come from what real runs do (anchors: BLOOM tr1-13B took ~500 iterations to recover
from a benign spike; BLOOM-176B's grad norm rose 4 steps before its loss; OLMo/Levanter skip
steps at 6 sigma; fp16 loss scalers halve on every overflow) rather than from our test curves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dataloaders.trainers import DEFAULT_TRAINER, REGISTRY, Trainer

# Hoffmann et al. 2022 (Chinchilla) fit of L(N, D) = E + A / N^alpha + B / D^beta.
CHINCHILLA = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
# Epoch AI's refit (Besiroglu et al. 2024), shown beside it because the two disagree.
CHINCHILLA_EPOCH = {"E": 1.82, "A": 482.0, "B": 2085.4, "alpha": 0.348, "beta": 0.366}


@dataclass(frozen=True)
class TriageConfig:
    """Detector settings. Steps are training iterations; rows are logged points."""

    # Normal: EMA half-life of the loss (steps), and the rows of the robust local window.
    ema_half_life: float = 200.0
    # The robust local window covers about `local_steps` steps, between 8 and `window_rows`
    # logged points (a log every 100 steps cannot afford 64 points of history per decision).
    local_steps: int = 500
    window_rows: int = 64
    # Spikes: robust z above `z_threshold` and at least `min_rel_height` above the local level
    # (a tiny bump on an ultra-smooth averaged curve is not worth a restart).
    z_threshold: float = 6.0
    min_rel_height: float = 0.02
    noise_floor_rel: float = 0.005
    merge_gap_rows: int = 2
    # A spike has recovered when the loss is back within max(tol_sigma * noise, tol_rel * level)
    # of its pre-spike level. Until `recovery_window` steps have passed it may still come back.
    recovery_window: int = 500
    tol_sigma: float = 3.0
    tol_rel: float = 0.01
    fast_recovery_steps: int = 50
    slow_recovery_steps: int = 200
    # Grad-norm alarm: a fast EMA (half-life in steps) above `grad_factor` x the trailing median.
    grad_half_life: float = 4.0
    grad_baseline_rows: int = 200
    grad_factor: float = 3.0
    alarm_lookahead_steps: int = 200
    # fp16 loss scale: a drop to 1/collapse_factor of its recent max (3 halvings), or the floor.
    loss_scale_window: int = 1000
    loss_scale_collapse_factor: float = 8.0
    loss_scale_floor: float = 1.0
    # Divergence: the smoothed loss stays `divergence_rel` above its best for this many steps.
    divergence_min_steps: int = 200
    divergence_rel: float = 0.10
    # Plateau: over `plateau_steps` the loss fell by under `plateau_frac` of what the power law
    # fitted so far predicted.
    plateau_steps: int = 2000
    plateau_frac: float = 0.3
    # ... and only where the power law expected a drop worth noticing (this share of the loss):
    # late in a healthy run it expects less than 1% per plateau length, and missing that is noise.
    plateau_min_drop_rel: float = 0.01
    lr_floor_frac: float = 0.1
    # Recurrence: benign spikes are a run-level finding from `recur_min_count` on, past
    # `recur_per_month` a month where the log has a clock (the field guide: "once or twice a
    # month"), else past `recur_per_1000_steps` (at 10 s per iteration, 0.5 per 1,000 steps is
    # ~4 a day: far past twice a month, so the step rule only errs towards silence).
    recur_min_count: int = 3
    recur_per_month: float = 2.0
    recur_per_1000_steps: float = 0.5
    # Sustained grad-norm rise: the trailing median over the lowest trailing median of the
    # previous `grad_reference_rows` rows (the level before the rise began: it does not follow
    # a slow rise the way the trailing median does).
    grad_reference_rows: int = 2000
    # Slow climb: over `climb_steps` the loss EMA rose by over `climb_min_rel` of its level,
    # steadily (below the divergence threshold: a WATCH event, with its slope).
    climb_steps: int = 2000
    climb_min_rel: float = 0.01
    chinchilla: dict[str, float] = field(default_factory=lambda: dict(CHINCHILLA))


@dataclass(frozen=True)
class RunInfo:
    """What the log cannot say by itself, given on the command line."""

    checkpoints: tuple[int, ...] = ()
    config_path: str | None = None
    from_checkpoint: str | None = None  # a trainer's save directory, instead of a config
    corpus_tokens: float | None = None
    params: float | None = None
    seq_length: int | None = None
    # From the config (--config) when triage could read it: each data stage's first iteration
    # (a stage switch before a spike is new data, the first suspect).
    stage_starts: tuple[int, ...] = ()
    config_read: bool = False
    train_iters: int | None = None  # the config's run length: a spike past it is another run's
    window: int | None = None  # the spike window the user fixed (watch --spike-args --window)
    # The run's trainer (the config's training.trainer; Megatron-LM's without a config): it
    # names the checkpoint folders the rollback recommends.
    trainer: Trainer = field(default_factory=lambda: REGISTRY[DEFAULT_TRAINER])
