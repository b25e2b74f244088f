"""`forensics triage LOG --out DIR`: read a loss curve like a senior training engineer.

Reads the log (Megatron stdout, TensorBoard, W&B CSV, JSONL/CSV, HF trainer_state.json), finds
spikes (benign / malignant / undecided), grad-norm and loss-scale alarms, divergence and plateaus,
and writes events.json, summary.json, report.md and triage.png. Nothing heavy is imported at
module level: this command must start fast and never import torch.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from dataloaders.console import make_console
from dataloaders.regular_files import check_input_path
from dataloaders.run_config import load_config
from dataloaders.trainers import DEFAULT_TRAINER, Trainer, get_trainer, writer_of
from forensics.commands.options import (
    CheckpointsOption,
    GradFactorOption,
    PlateauStepsOption,
    RecoveryWindowOption,
    ZThresholdOption,
    check_steps,
)
from forensics.errors import ForensicsError
from forensics.outputs import check_output_dir, fresh_output, hold_lock
from forensics.publish_set import finish_before_writing
from forensics.triage.analyze import triage
from forensics.triage.config import RunInfo, TriageConfig
from forensics.triage.formats import FORMATS, detect_format, triage_help
from forensics.triage.readers import LogWarning, read_log
from forensics.triage.report import OUTPUT_NAMES, STATE_DIR, terminal_lines, write_outputs
from forensics.window import stage_starts


def parse_checkpoints(spec: str | None, trainer: Trainer) -> tuple[int, ...]:
    """`--checkpoints 1000,2000`, or a save folder: the checkpoints `trainer` (the run's) saved
    in it (Megatron's `iter_NNNNNNN` subdirectories, OLMo-core's `stepN`)."""
    if not spec:
        return ()
    if re.fullmatch(r"[\d,\s]+", spec):  # a list, however long: never tried as a path
        return tuple(sorted(int(x) for x in re.split(r"[,\s]+", spec) if x))
    p = Path(spec)
    try:
        is_dir = p.is_dir()
    except OSError as err:  # a name too long for the file system, say
        raise ForensicsError(
            f"--checkpoints {spec[:60]}: not a directory ({err.strerror})"
        ) from None
    if is_dir:
        iters = trainer.checkpoints(p)
        if not iters:
            example = trainer.checkpoint_name(0).rstrip("0") + "N"
            raise ForensicsError(
                f"--checkpoints {spec}: no {trainer.name} checkpoint folders ({example}) found"
            )
        return tuple(sorted(iters))
    try:
        return tuple(sorted(int(x) for x in spec.replace(" ", "").split(",") if x))
    except ValueError:
        raise ForensicsError(
            f"--checkpoints {spec}: not a directory and not a comma-separated list of iterations"
        ) from None


def triage_command(
    log: Annotated[Path, typer.Argument(help="Training log: file, or TensorBoard run dir.")],
    out: Annotated[Path, typer.Option("--out", help="Directory for events.json, report.md, PNG.")],
    format: Annotated[
        str,
        typer.Option(help=triage_help()),
    ] = "auto",
    checkpoints: CheckpointsOption = None,
    config: Annotated[
        str | None, typer.Option(help="Run config, filled into the suggested spike command.")
    ] = None,
    from_checkpoint: Annotated[
        str | None,
        typer.Option(
            "--from-checkpoint",
            help="The trainer's save directory, filled into the suggested spike command "
            "instead of a config.",
        ),
    ] = None,
    corpus_tokens: Annotated[
        float | None, typer.Option(help="Tokens in the corpus (plateau: repeated data?).")
    ] = None,
    params: Annotated[
        float | None, typer.Option(help="Model parameters (plateau: Chinchilla expected loss).")
    ] = None,
    seq_length: Annotated[
        int | None, typer.Option(help="Tokens per sample, to count tokens from samples.")
    ] = None,
    ema_half_life: Annotated[
        float, typer.Option(help="EMA half-life of the loss (steps).")
    ] = 200.0,
    recovery_window: RecoveryWindowOption = 500,
    grad_factor: GradFactorOption = 3.0,
    grad_half_life: Annotated[float, typer.Option(help="Grad-norm EMA half-life (steps).")] = 4.0,
    z_threshold: ZThresholdOption = 6.0,
    plateau_steps: PlateauStepsOption = 2000,
    force: Annotated[
        bool, typer.Option("--force", help="Replace triage outputs already in OUT.")
    ] = False,
) -> None:
    """Triage a loss curve: spikes (benign/malignant/undecided), alarms, divergence, plateaus."""
    from rich.markup import escape

    if format not in FORMATS:
        raise ForensicsError(f"--format {format}: unknown; choose one of {', '.join(FORMATS)}")
    cfg = detector_settings(
        ema_half_life, recovery_window, grad_factor, grad_half_life, z_threshold, plateau_steps
    )
    finish_before_writing(out, out / STATE_DIR, "forensics triage", force=force)
    check_output_dir(out, OUTPUT_NAMES, force=force)
    console = make_console()
    err = make_console(stderr=True, soft_wrap=True)  # a warning names a path: never cut it
    info = RunInfo(
        config_path=config,
        from_checkpoint=from_checkpoint,
        corpus_tokens=corpus_tokens,
        params=params,
        seq_length=seq_length,
    )
    info = read_run_config(info, err)
    table = _read_log(log, format, err)
    fmt = detect_format(log) if format == "auto" else format
    if checkpoints:  # given: they win over the config's
        info = _with_checkpoints(info, checkpoints, fmt)
    with console.status("triaging"):
        result = triage(table, cfg, info)
        paths = _publish(result, out, str(log), fmt, force)
    for line in terminal_lines(result):
        console.print(line)
    console.print(f"wrote {escape(', '.join(str(p) for p in paths))}")


def detector_settings(
    ema_half_life: float,
    recovery_window: int,
    grad_factor: float,
    grad_half_life: float,
    z_threshold: float,
    plateau_steps: int,
) -> Any:
    """The detectors' TriageConfig from the command line, each number checked first."""
    check_steps(
        recovery_window,
        plateau_steps,
        grad_factor=grad_factor,
        z_threshold=z_threshold,
        ema_half_life=ema_half_life,
        grad_half_life=grad_half_life,
    )
    return TriageConfig(
        ema_half_life=ema_half_life,
        recovery_window=recovery_window,
        grad_factor=grad_factor,
        grad_half_life=grad_half_life,
        z_threshold=z_threshold,
        plateau_steps=plateau_steps,
    )


def _with_checkpoints(info: RunInfo, spec: str, fmt: str) -> RunInfo:
    """`info` with --checkpoints as the checkpoint list, a save folder read for the run's
    trainer's folders: the config's, else the trainer whose log format the log is in (an
    OLMo-core log: `stepN`), else Megatron-LM's."""
    trainer = info.trainer if info.config_read else (writer_of(fmt) or info.trainer)
    return replace(info, trainer=trainer, checkpoints=parse_checkpoints(spec, trainer))


def config_trainer(config_path: str | None) -> Trainer:
    """The run's trainer, which names its checkpoint folders: the config's training.trainer
    when --config is a file here, else Megatron-LM's (the default trainer)."""
    if config_path is None or not Path(config_path).is_file():
        return get_trainer(DEFAULT_TRAINER)
    return load_config(config_path).training.registered_trainer


def read_run_config(info: RunInfo, err: Any) -> RunInfo:
    """The config's data stages (a stage switch before a spike is the first suspect), its
    trainer and its checkpoints (--checkpoints, when given, replaces them). A config that is not
    on this machine is only filled into the spike command, and a yellow line says its stages
    were not read; one that is here but does not load is refused (load_config's one-line
    error)."""
    from rich.markup import escape

    if info.config_path is None:
        return info
    if not Path(info.config_path).is_file():
        err.print(
            f"[yellow]warning:[/] --config {escape(info.config_path)}: no such file here; it is "
            "filled into the spike command as given, its data stages and checkpoints not read"
        )
        return info
    config = load_config(info.config_path)
    trainer = config.training.registered_trainer
    return replace(
        info,
        stage_starts=tuple(stage_starts(config)),
        trainer=trainer,
        checkpoints=tuple(config.available_checkpoints(trainer)),
        config_read=True,
        train_iters=config.training.iterations(config.training.global_batch_size),
    )


def _publish(result: Any, out: Path, source: str, fmt: str, force: bool) -> list[Path]:
    """Write the outputs under the output directory's lock, as one set.

    Nothing is created before this point, so a bad log leaves no directory behind; a failure
    here (a full disk, a signal) removes a directory this run created, or else the lock folder
    it added to an existing one."""
    import shutil

    state = out / STATE_DIR
    had_state = state.exists()
    with fresh_output(out, state):
        lock = hold_lock(state, "forensics triage")
        try:
            check_output_dir(out, OUTPUT_NAMES, force=force)  # again, under the lock
            return write_outputs(result, out, source, fmt)
        except BaseException:
            if not had_state:
                shutil.rmtree(state, ignore_errors=True)
            raise
        finally:
            lock.close()


def check_log_file(log: Path) -> None:
    """A log must be a file (or a TensorBoard directory) that can be read twice: a FIFO blocks
    until a writer comes, a pipe (`<(...)`, /dev/stdin) can be read only once. Refused in one
    line (the one check every input goes through); a missing path is the reader's to say."""
    check_input_path(log)


def _read_log(log: Path, format: str, err: Any) -> Any:
    """The log's table; the reader's warnings (truncated files, skipped records) printed on
    stderr as they are, one yellow line each."""
    import warnings

    from rich.markup import escape

    check_log_file(log)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LogWarning)
        table = read_log(log, format)
    for w in caught:
        if issubclass(w.category, LogWarning):
            err.print(f"[yellow]warning:[/] {escape(str(w.message))}")
    return table
