"""`forensics watch LOG --out DIR`: triage's alarms while the run is still training.

Follows a growing Megatron / OLMo-core / JSONL / CSV log, runs triage's detectors on every batch
of new lines, raises each event once (events.jsonl in DIR is the memory a restarted watcher resumes
from), posts to a webhook, keeps a Prometheus textfile current, and on a malignant verdict with a
config runs `forensics spike` in the background. Nothing heavy is imported: no torch.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from dataloaders.console import make_console
from forensics.commands.options import (
    CheckpointsOption,
    GradFactorOption,
    PlateauStepsOption,
    RecoveryWindowOption,
    ZThresholdOption,
    check_steps,
)
from forensics.commands.triage import config_trainer, parse_checkpoints
from forensics.errors import ForensicsError
from forensics.outputs import fresh_output
from forensics.triage.config import RunInfo, TriageConfig
from forensics.triage.formats import watch_help
from forensics.watch.loop import LOCK_FILE, Watcher, WatchOptions
from forensics.watch.sinks import WEBHOOK_FORMATS
from forensics.watch.terminal import Terminal

# The watcher's own options (the detectors' are triage's, in options.py).
LogArgument = Annotated[
    Path, typer.Argument(help="The training log being written, or a TensorBoard run dir.")
]
OutOption = Annotated[
    Path | None,
    typer.Option("--out", help="Watch directory: events.jsonl, state. Default: LOG.watch/"),
]
WatchConfigOption = Annotated[
    str | None,
    typer.Option("--config", help="Run config: enables `forensics spike` on a malignant spike."),
]
WatchFromCheckpointOption = Annotated[
    str | None,
    typer.Option(
        "--from-checkpoint",
        help="Instead of --config: the trainer's save folder (Megatron-LM --save, OLMo-core "
        "save_folder), read by `forensics spike` when a spike is raised; it may be empty "
        "when the watcher starts.",
    ),
]
OnMalignantOption = Annotated[
    str | None,
    typer.Option(
        "--on-malignant",
        help="spike: run forensics spike as soon as a spike is raised, before its verdict "
        "(default with --config or --from-checkpoint) | none.",
    ),
]
SpikeArgsOption = Annotated[
    str,
    typer.Option("--spike-args", help="More options for the spike run, e.g. '--embed-cap 0'."),
]
StallAfterOption = Annotated[
    float,
    typer.Option("--stall-after", help="Say so when the log has not grown this long (s)."),
]
MaxPollsOption = Annotated[
    int | None, typer.Option(help="Stop after this many polls (default: until Ctrl-C).")
]


def watch_command(
    log: LogArgument,
    out: OutOption = None,
    config: WatchConfigOption = None,
    from_checkpoint: WatchFromCheckpointOption = None,
    webhook: Annotated[
        str | None, typer.Option("--webhook", help="POST every message as JSON to this URL.")
    ] = None,
    webhook_format: Annotated[
        str,
        typer.Option(
            "--webhook-format",
            help='json: a plain JSON event | slack: Slack\'s incoming-webhook {"text": ...}.',
        ),
    ] = "json",
    prometheus: Annotated[
        Path | None,
        typer.Option("--prometheus", help="Prometheus textfile to keep current (node_exporter)."),
    ] = None,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between polls.")] = 5.0,
    on_malignant: OnMalignantOption = None,
    spike_args: SpikeArgsOption = "",
    format: Annotated[str, typer.Option(help=watch_help())] = "auto",
    stall_after: StallAfterOption = 600.0,
    checkpoints: CheckpointsOption = None,
    recovery_window: RecoveryWindowOption = 500,
    grad_factor: GradFactorOption = 3.0,
    z_threshold: ZThresholdOption = 6.0,
    plateau_steps: PlateauStepsOption = 2000,
    max_polls: MaxPollsOption = None,
    live: Annotated[bool, typer.Option(help="Live view when stdout is a terminal.")] = True,
) -> None:
    """Follow a training log as it grows: alarms, spike verdicts, divergence, plateaus."""
    on_malignant = _on_malignant(on_malignant, config, from_checkpoint)
    _check_seconds(interval=interval, stall_after=stall_after)
    check_steps(
        recovery_window,
        plateau_steps,
        grad_factor=grad_factor,
        z_threshold=z_threshold,
    )
    _check_webhook(webhook, webhook_format)
    window, extra = _spike_window(_spike_args(spike_args))
    out = out or log.with_name(log.name.rstrip("/") + ".watch")
    cfg = TriageConfig(
        recovery_window=recovery_window,
        grad_factor=grad_factor,
        z_threshold=z_threshold,
        plateau_steps=plateau_steps,
    )
    info = RunInfo(config_path=config, window=window)
    if checkpoints:  # a save folder holds the checkpoint folders the run's trainer names
        trainer = config_trainer(config)
        info = replace(info, trainer=trainer, checkpoints=parse_checkpoints(checkpoints, trainer))
    opts = WatchOptions(
        log=log,
        out=out,
        fmt=format,
        interval=interval,
        webhook=webhook,
        webhook_format=webhook_format,
        prometheus=prometheus,
        config=_absolute(config),
        from_checkpoint=_absolute(from_checkpoint),
        on_malignant=on_malignant,
        stall_after=stall_after,
        cfg=cfg,
        run=info,
        spike_args=extra,
    )
    console = make_console()
    _say_if_missing(log, stall_after, console)
    with fresh_output(out, out / LOCK_FILE):  # a refused first start leaves no directory
        watcher = Watcher(opts, Terminal(console, str(log), live))
        watcher.run(max_polls=max_polls)
    _refuse_undelivered(watcher, webhook, out)


def _check_seconds(**seconds: float) -> None:
    """--interval and --stall-after: finite and positive (nan compares false with everything,
    so a nan interval would poll in a busy loop)."""
    for key, value in seconds.items():
        if not math.isfinite(value) or value <= 0:
            flag = "--" + key.replace("_", "-")
            raise ForensicsError(f"{flag} {value}: must be a positive number of seconds")


def _refuse_undelivered(watcher: Any, webhook: str | None, out: Path) -> None:
    """Exit non-zero, naming them, when messages of this watcher never reached the webhook
    (each was said on the terminal as it failed; state.json lists them)."""
    missed = [e for e in watcher.undelivered if e.get("seq") not in watcher.reported_before]
    if missed:
        raise ForensicsError(
            f"--webhook {webhook}: {len(missed)} message(s) never delivered (#"
            + ", #".join(f"{e['seq']} {e['kind']}" for e in missed[:5])
            + (", ..." if len(missed) > 5 else "")
            + f"; last error: {missed[-1]['error']}); listed under 'undelivered' in "
            f"{out / 'state.json'}"
        )


def _say_if_missing(log: Path, stall_after: float, console: Any) -> None:
    """A log that does not exist yet is waited for (the watcher may start before the trainer),
    and the user is told so at once; one whose folder does not exist either is a typo, refused."""
    if log.exists():
        return
    if not log.absolute().parent.is_dir():
        raise ForensicsError(f"{log}: neither it nor its folder exists")
    console.print(
        f"{log}: does not exist yet; waiting for it to appear (a note after --stall-after "
        f"{stall_after:g} s if it does not)",
        markup=False,
        highlight=False,
    )


def _absolute(path: str | None) -> str | None:
    """The path as the spike run started from another directory reads it."""
    return str(Path(path).expanduser().resolve()) if path else None


def _check_webhook(webhook: str | None, webhook_format: str) -> None:
    """--webhook is an http(s) URL; --webhook-format one the watcher writes."""
    if webhook and not webhook.startswith(("http://", "https://")):
        raise ForensicsError(f"--webhook {webhook}: not an http(s) URL")
    if webhook_format not in WEBHOOK_FORMATS:
        raise ForensicsError(
            f"--webhook-format {webhook_format}: choose one of {', '.join(WEBHOOK_FORMATS)}"
        )


def _on_malignant(on_malignant: str | None, config: str | None, saved: str | None) -> str:
    """--on-malignant checked against --config / --from-checkpoint (default: spike with either,
    else none). The save folder need not hold a checkpoint yet (the trainer writes it), but
    its parent must exist: a mistyped path is refused now, not at the spike."""
    if config and saved:
        raise ForensicsError("give --config or --from-checkpoint, not both")
    if on_malignant is None:
        on_malignant = "spike" if config or saved else "none"
    if on_malignant not in ("spike", "none"):
        raise ForensicsError(f"--on-malignant {on_malignant}: choose spike or none")
    if on_malignant == "spike" and not (config or saved):
        raise ForensicsError(
            "--on-malignant spike needs --config or --from-checkpoint (the run to replay)"
        )
    if config and not Path(config).is_file():
        raise ForensicsError(f"--config {config}: no such file")
    if saved:
        folder = Path(saved).expanduser()
        if folder.exists() and not folder.is_dir():
            raise ForensicsError(f"--from-checkpoint {saved}: not a directory")
        if not folder.exists() and not folder.absolute().parent.is_dir():
            raise ForensicsError(f"--from-checkpoint {saved}: neither it nor its parent exists")
    return on_malignant


def _spike_window(extra: tuple[str, ...]) -> tuple[int | None, tuple[str, ...]]:
    """`--window N` taken out of --spike-args: the spike runs with it, and the watcher's
    messages and suggested commands say that window, not the one it would have chosen."""
    window, rest, args = None, [], list(extra)
    while args:
        arg = args.pop(0)
        if arg == "--window" or arg.startswith("--window="):
            value = arg.partition("=")[2] if "=" in arg else (args.pop(0) if args else "")
            if not value.isdigit() or int(value) <= 0:
                raise ForensicsError(
                    f"--spike-args: --window {value!r} must be a positive number of iterations"
                )
            window = int(value)
        else:
            rest.append(arg)
    return window, tuple(rest)


def _spike_args(spike_args: str) -> tuple[str, ...]:
    """--spike-args split as the shell would."""
    try:
        return tuple(shlex.split(spike_args))
    except ValueError as err:
        raise ForensicsError(f"--spike-args {spike_args!r}: {err}") from None
