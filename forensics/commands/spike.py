"""`forensics spike`: from a spike's iteration to the culprit, the rollback and the skip list.

The pipeline is imported at the top; torch, transformers and sentence-transformers load only
when a stage uses them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dataloaders.storage import fetched
from forensics.commands.options import (
    ConfigOption,
    EngineOption,
    FromCheckpointOption,
    MegatronArgsOption,
    RayAddressOption,
    TrainerOption,
    WorkersOption,
)
from forensics.commands.rescore import (
    BatchOption,
    CapOption,
    CheckpointOption,
    DtypeOption,
    GradOption,
    LossesOption,
    rescore_options,
)
from forensics.errors import ForensicsError
from forensics.outputs import fresh_output
from forensics.run_source import resolve_run_config
from forensics.spike import SpikeOptions, run_spike
from forensics.window import SPIKE_WINDOW

StepOption = Annotated[int, typer.Option("--step", help="Iteration of the loss spike (1-indexed).")]

WindowOption = Annotated[
    int, typer.Option("--window", help="Iterations replayed before the spike, inclusive.")
]

OutOption = Annotated[
    Path | None,
    typer.Option("--out", help="Output directory. Default: ./spike-<step>/."),
]

BaselineOption = Annotated[
    str | None,
    typer.Option(
        "--baseline",
        help="Baseline iterations FIRST-LAST, or 'stage' (start of the spike's data stage). "
        "Default: as long as the window, ending 10 windows earlier (clamped at 1).",
    ),
]

BaselineOffsetOption = Annotated[
    int | None,
    typer.Option("--baseline-offset", help="Baseline ends this many iterations before the window."),
]

AfterOption = Annotated[
    int, typer.Option("--after", help="Also skip up to this many iterations past the spike.")
]

ThresholdOption = Annotated[
    float,
    typer.Option(
        "--threshold",
        help="Skip an iteration when its share of samples holding culprit documents exceeds "
        "this (default 0: any).",
    ),
]

SkipAheadOption = Annotated[
    bool,
    typer.Option(
        "--skip-ahead", help="Add the densest iterations ahead (see --ahead-share) to the skip."
    ),
]

AheadShareOption = Annotated[
    float,
    typer.Option("--ahead-share", help="An iteration ahead is dense from this culprit share."),
]

CulpritOption = Annotated[
    list[str] | None,
    typer.Option(
        "--culprit",
        help="Blame these cluster ids (from report.json) instead of the verdicts; repeatable.",
    ),
]

EmbedCapOption = Annotated[
    int | None,
    typer.Option("--embed-cap", help="Documents to embed (0: no embedding clusters)."),
]

EmbedModelOption = Annotated[
    str | None,
    typer.Option(
        "--embed-model",
        help="'static' (default on a CPU: a model2vec model distilled once from the "
        "packaged all-MiniLM-L6-v2), 'minilm' (all-MiniLM-L6-v2 itself; the default with "
        "--device cuda), or a local model2vec or sentence-transformers directory.",
    ),
]

DeviceOption = Annotated[
    str,
    typer.Option("--device", help="Torch device for the embeddings and rescoring, e.g. cuda."),
]

ExhaustiveOption = Annotated[
    bool,
    typer.Option(
        "--exhaustive",
        help="Decode and score every distinct document of window and baseline (the reference; "
        "slow on a production window) instead of a sample of each group and every document "
        "of the groups named culprit or suspect.",
    ),
]

SampleDocsOption = Annotated[
    int | None,
    typer.Option(
        "--sample-docs",
        help="Documents decoded and scored per group in the evidence pass (default 120: a 95% "
        "interval of at most +-9 points on each group's flagged rate, 97-100% when all are "
        "flagged; a smaller group is scored whole, a group near the dirty line in pass 3).",
    ),
]

ForceOption = Annotated[
    bool,
    typer.Option(
        "--force", help="Overwrite skip.json / write into a directory holding another run."
    ),
]

QuietOption = Annotated[bool, typer.Option("--quiet", help="No progress and no summary.")]


def spike_command(
    step: StepOption,
    config: ConfigOption = None,
    megatron_args: MegatronArgsOption = None,
    from_checkpoint: FromCheckpointOption = None,
    window: WindowOption = SPIKE_WINDOW,
    out: OutOption = None,
    baseline: BaselineOption = None,
    baseline_offset: BaselineOffsetOption = None,
    after: AfterOption = 0,
    threshold: ThresholdOption = 0.0,
    skip_ahead: SkipAheadOption = False,
    ahead_share: AheadShareOption = 0.25,
    culprit: CulpritOption = None,
    embed_cap: EmbedCapOption = None,
    embed_model: EmbedModelOption = None,
    device: DeviceOption = "cpu",
    trainer: TrainerOption = None,
    engine: EngineOption = "local",
    workers: WorkersOption = 1,
    ray_address: RayAddressOption = None,
    checkpoint: CheckpointOption = None,
    losses: LossesOption = None,
    dtype: DtypeOption = "float32",
    batch_size: BatchOption = 8,
    rescore_cap: CapOption = 512,
    grad_norm: GradOption = False,
    exhaustive: ExhaustiveOption = False,
    sample_docs: SampleDocsOption = None,
    force: ForceOption = False,
    quiet: QuietOption = False,
) -> None:
    """Replay the iterations before a loss spike, find the data to blame, and write the report,
    the rollback point and the skip list (skip.json, megatron_args.txt)."""

    if exhaustive and sample_docs is not None:
        raise ForensicsError(
            f"--sample-docs {sample_docs} with --exhaustive: every document is scored then; "
            "give one of them"
        )
    run = resolve_run_config(config, megatron_args, from_checkpoint, step)
    options = SpikeOptions(
        step=step,
        window=window,
        baseline=baseline,
        baseline_offset=baseline_offset,
        after=after,
        threshold=threshold,
        skip_ahead=skip_ahead,
        ahead_share=ahead_share,
        culprits=tuple(culprit) if culprit else None,
        embed_cap=embed_cap,
        embed_model=embed_model,
        device=device,
        engine=engine,
        workers=workers,
        ray_address=ray_address,
        rescore=rescore_options(
            checkpoint, losses, device, dtype, batch_size, rescore_cap, grad_norm, not quiet
        ),
        exhaustive=exhaustive,
        **({} if sample_docs is None else {"sample_docs": sample_docs}),
        force=force,
        progress=not quiet,
    )
    target = out or Path.cwd() / f"spike-{step}"
    with fresh_output(target, target / ".cache"):  # a failed first run leaves no directory
        run_spike(run, target, options, trainer)

    if fetched.line():
        print(fetched.line())
