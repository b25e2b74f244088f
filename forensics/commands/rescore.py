"""`forensics rescore`: run the pre-spike checkpoint over the window's exact samples.

The pipeline is imported at the top; torch and transformers load only when a checkpoint is
actually run. The rescoring options are defined here once
and shared with `forensics spike`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from forensics.commands.options import ConfigOption, FromCheckpointOption, MegatronArgsOption
from forensics.rescore import RescoreOptions
from forensics.rescore.command import run_rescore_command

CheckpointOption = Annotated[
    Path | None,
    typer.Option(
        "--checkpoint",
        help="The pre-spike checkpoint: a Hugging Face model directory, a Megatron iteration "
        "directory (torch_dist or mp_rank_*/model_optim_rng.pt, any TP/PP) or an OLMo-core "
        "stepN directory: the window's samples and a baseline sample are rescored with it.",
    ),
]
LossesOption = Annotated[
    Path | None,
    typer.Option(
        "--losses",
        help="Per-sample or per-token losses computed elsewhere over the exported samples "
        "(Parquet: iteration, position, loss | token_losses; or .npy in an export dir).",
    ),
]
DtypeOption = Annotated[
    str, typer.Option("--dtype", help="Model dtype: float32, bfloat16 or float16.")
]
BatchOption = Annotated[int, typer.Option("--batch-size", help="Samples per forward pass.")]
CapOption = Annotated[
    int,
    typer.Option(
        "--rescore-cap",
        help="Window samples rescored (stratified by dataset when the window holds more); the "
        "baseline gets as many.",
    ),
]
GradOption = Annotated[
    bool, typer.Option("--grad-norm", help="Also the per-sample gradient norm (a backward each).")
]


def rescore_options(
    checkpoint: Path | None,
    losses: Path | None,
    device: str,
    dtype: str,
    batch_size: int,
    cap: int,
    grad_norm: bool,
    progress: bool,
) -> Any:
    """RescoreOptions from the command line, or None when neither source was given."""
    if checkpoint is None and losses is None:
        return None

    return RescoreOptions(
        checkpoint=checkpoint,
        losses=losses,
        device=device,
        dtype=dtype,
        batch_size=batch_size,
        cap=cap,
        grad_norm=grad_norm,
        progress=progress,
    )


def rescore_command(
    step: Annotated[int, typer.Option("--step", help="Iteration of the loss spike (1-indexed).")],
    config: ConfigOption = None,
    megatron_args: MegatronArgsOption = None,
    from_checkpoint: FromCheckpointOption = None,
    window: Annotated[
        int, typer.Option("--window", help="Iterations before the spike, inclusive.")
    ] = 300,
    baseline: Annotated[
        str | None,
        typer.Option("--baseline", help="Baseline iterations FIRST-LAST or 'stage' (as spike)."),
    ] = None,
    checkpoint: CheckpointOption = None,
    losses: LossesOption = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Output directory. Default: ./rescore-<step>/."),
    ] = None,
    export_tokens: Annotated[
        Path | None,
        typer.Option(
            "--export-tokens",
            help="Instead of scoring: write the window's and the baseline's samples (tokens.npy "
            "+ index) for scoring elsewhere; bring the losses back with --losses.",
        ),
    ] = None,
    device: Annotated[str, typer.Option("--device", help="Torch device, e.g. cuda.")] = "cpu",
    dtype: DtypeOption = "float32",
    batch_size: BatchOption = 8,
    rescore_cap: CapOption = 512,
    grad_norm: GradOption = False,
    force: Annotated[bool, typer.Option("--force", help="Overwrite existing outputs.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress and no summary.")] = False,
) -> None:
    """Rescore the window before a spike with a checkpoint (or losses computed elsewhere):
    rescore.parquet holds per-sample and per-segment losses as z-scores against a baseline."""
    run_rescore_command(
        config=config,
        megatron_args=megatron_args,
        from_checkpoint=from_checkpoint,
        step=step,
        window=window,
        baseline=baseline,
        out=out or Path.cwd() / f"rescore-{step}",
        export_tokens=export_tokens,
        options=rescore_options(
            checkpoint, losses, device, dtype, batch_size, rescore_cap, grad_norm, not quiet
        ),
        force=force,
        progress=not quiet,
    )
