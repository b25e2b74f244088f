"""Options several commands share, defined once so their names and help stay the same."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dataloaders.trainers import Trainer, get_trainer, trainer_help
from forensics.errors import ForensicsError

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config", help="Run config (YAML). Default: $FORENSICS_CONFIG, else ./forensics.yaml."
    ),
]

MegatronArgsOption = Annotated[
    str | None,
    typer.Option(
        "--megatron-args",
        help="The training job's Megatron arguments instead of a config "
        "('--data-path 0.7 web 0.3 code --seq-length 4096 ...', or @FILE).",
    ),
]

# The one look-up of --trainer: the command gets the Trainer (an unknown name is one line).
TrainerOption = Annotated[
    Trainer | None,
    typer.Option("--trainer", help=trainer_help(), parser=get_trainer, metavar="<str>"),
]

EngineOption = Annotated[
    str,
    typer.Option(
        "--engine",
        help="Where decoding and scoring run: local (this machine; a process pool with "
        "--workers > 1) or ray (Ray Data, on --ray-address or a local Ray instance).",
    ),
]

RayAddressOption = Annotated[
    str | None,
    typer.Option("--ray-address", help="HOST:PORT of a Ray head (default: start one here)."),
]

WorkersOption = Annotated[int, typer.Option("--workers", help="Worker processes.")]

# The detectors' options, shared by `triage` and `watch` (watch runs triage's detectors).
CheckpointsOption = Annotated[
    str | None, typer.Option(help="Saved iterations '1000,2000' or a dir of iter_NNNNNNN.")
]
RecoveryWindowOption = Annotated[
    int, typer.Option(help="Steps a spike may take to come back before it is malignant.")
]
GradFactorOption = Annotated[float, typer.Option(help="Grad-norm alarm: EMA over x baseline.")]
ZThresholdOption = Annotated[float, typer.Option(help="Robust z over the local level = spike.")]
PlateauStepsOption = Annotated[
    int,
    typer.Option(
        help="Shortest flat stretch = plateau, in steps. The default 2000 is 5.6 h at 10 s per "
        "iteration, 2.3 days at 100 s; where the log has an iteration time or timestamps, each "
        "plateau (and the recurrence of spikes) is also stated in hours and days."
    ),
]


def check_steps(recovery_window: int, plateau_steps: int, **thresholds: float) -> None:
    """--recovery-window and --plateau-steps must be positive numbers of steps; the detector's
    thresholds (`grad_factor`, `z_threshold`, the half-lives) finite, a factor over 1 and the
    rest positive: nan compares false with everything, so a nan threshold never fires."""
    import math

    for name, value in (("--recovery-window", recovery_window), ("--plateau-steps", plateau_steps)):
        if value <= 0:
            raise ForensicsError(f"{name} {value}: must be a positive number of steps")
    for key, value in thresholds.items():
        flag = "--" + key.replace("_", "-")
        if not math.isfinite(value):
            raise ForensicsError(f"{flag} {value}: must be a finite number")
        if key == "grad_factor" and value <= 1:
            raise ForensicsError(f"{flag} {value}: must be above 1 (times the grad-norm EMA)")
        if value <= 0:
            raise ForensicsError(f"{flag} {value}: must be positive")


FromCheckpointOption = Annotated[
    Path | None,
    typer.Option(
        "--from-checkpoint",
        help="Read the run's description from what the trainer saved instead of a config: a "
        "Megatron-LM --save directory (or one iter_NNNNNNN in it), or an OLMo-core save "
        "folder. An explicit --config or --megatron-args wins.",
    ),
]
