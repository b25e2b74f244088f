"""The `forensics` command line.

Each subcommand lives in `forensics/commands/<name>.py` as a plain typed function; this module only
registers them. Command modules import nothing heavy at module level (no torch, no
sentence-transformers, no megatron-core), so `forensics --help`, `replay`, `score` and `triage`
start fast.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import typer

from dataloaders.console import make_console
from dataloaders.regular_files import check_input_path
from dataloaders.storage import fetched
from forensics.commands import (
    check_skip,
    manifest,
    rebuild,
    replay,
    rescore,
    scan,
    score,
    spike,
    triage,
    watch,
)
from forensics.errors import EnvironmentProblem, ForensicsError

app = typer.Typer(
    name="forensics",
    help="Find the data behind a malignant loss spike and write the skip list for the restart.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"forensics {version('forensics')}")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Find the data behind a malignant loss spike and write the skip list for the restart."""
    fetched.reset()  # bytes fetched from object storage are counted per command


# In the README runbook's order: is it malignant, which data, then the ACTION the spike decided
# (remove and rebuild, or check the skip plan before pasting it), then the tools around them.
app.command("triage")(triage.triage_command)
app.command("spike")(spike.spike_command)
app.command("rebuild")(rebuild.rebuild_command)
app.command("check-skip")(check_skip.check_skip_command)
app.command("watch")(watch.watch_command)
app.command("scan")(scan.scan_command)
app.command("replay")(replay.replay_command)
app.command("score")(score.score_command)
app.command("manifest")(manifest.manifest_command)
app.command("rescore")(rescore.rescore_command)


def _show_flags_as_switches(command: Any) -> None:
    """--help shows a switch (`--force`) bare, not as `--force <bool>` which reads as if it took a
    value: typer prints the type of every option unless it has a metavar."""
    import click

    context = click.Context(command, help_option_names=["-h", "--help"])
    for param in [*command.params, command.get_help_option(context)]:
        if getattr(param, "is_flag", False):
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        _show_flags_as_switches(sub)


# Options typed `str` that name a file or folder the command reads (typer's Path options are
# found by their type).
_PATH_STRINGS = {"config", "from_checkpoint", "baseline", "checkpoint"}


def _guard_paths(command: Any) -> None:
    """Every path on the command line goes through `check_input_path` as it is parsed: a FIFO,
    device or socket is refused in one line before any command opens it (an output path too:
    writing into a FIFO blocks just the same)."""
    for param in getattr(command, "params", []):
        if not (_typed_path(param) or param.name in _PATH_STRINGS):
            continue

        def guarded(ctx: Any, par: Any, value: Any, _inner: Any = param.callback) -> Any:
            for item in value if isinstance(value, list | tuple) else (value,):
                if isinstance(item, str | os.PathLike):
                    label = par.opts[0] if par.opts[0].startswith("-") else ""
                    check_input_path(item, label)
            return _inner(ctx, par, value) if _inner is not None else value

        param.callback = guarded
    for sub in getattr(command, "commands", {}).values():
        _guard_paths(sub)


def _typed_path(param: Any) -> bool:
    """Whether a parameter's declared type is a `Path` (`Path`, `Path | None`, `list[Path]`):
    typer keeps the annotation (`type_descriptor`); a typer that converts to click types gives
    a `click.Path` instead."""
    import typing
    from pathlib import Path

    if type(getattr(param, "type", None)).__name__ == "Path":
        return True
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    stack = [annotation]
    while stack:
        kind = stack.pop()
        if isinstance(kind, type) and issubclass(kind, Path):
            return True
        stack.extend(typing.get_args(kind))
    return False


def main() -> None:
    """Entry point: user errors become one red line on stderr and exit code 2."""
    import signal

    # SIGINT and SIGTERM (a scheduler's kill, `timeout`) unwind the stack, so every `finally`
    # and output guard runs, and end in one line instead of a silent death. Not as
    # KeyboardInterrupt: typer turns that into a bare exit 130 before it reaches us.
    signal.signal(signal.SIGTERM, _interrupted)
    signal.signal(signal.SIGINT, _interrupted)
    try:
        command = typer.main.get_command(app)
        _show_flags_as_switches(command)
        _guard_paths(command)
        command(prog_name="forensics")
    except ForensicsError as err:
        sys.exit(_report_error(err))
    except Interrupted as err:
        sys.exit(_report_interrupt(err))
    except Exception as err:
        problem = EnvironmentProblem.of(err)
        if problem is not None:  # the machine's, not ours: one line, like a bad input
            sys.exit(_report_error(problem))
        sys.exit(_report_crash(err))  # our bug: one line for the user, the traceback in a file


def _report_error(err: ForensicsError) -> int:
    """One red line on stderr; the error's exit status."""
    from rich.markup import escape

    make_console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {escape(str(err))}")
    return err.exit_code


class Interrupted(BaseException):
    """SIGINT or SIGTERM, raised where the program was so that it unwinds."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _interrupted(signum: int, frame: object) -> None:
    raise Interrupted(signum)


def _report_interrupt(err: Interrupted) -> int:
    """One line on stderr; the exit status is the shell's 128 + signal (130, 143)."""
    import signal

    make_console(stderr=True, soft_wrap=True).print(
        f"[bold red]interrupted[/] ({signal.Signals(err.signum).name}): no output is left "
        "half-written (each is published whole or not at all, an unfinished first run leaves "
        "nothing); rerun to finish"
    )
    return 128 + err.signum


def _report_crash(err: Exception) -> int:
    """Save the traceback and say where; the user sees one line, not a stack."""
    import tempfile
    import time
    import traceback
    from pathlib import Path

    from rich.markup import escape

    folder = Path(tempfile.gettempdir()) / "forensics-crashes"
    path = folder / f"crash-{time.strftime('%Y%m%d-%H%M%S')}-{id(err):x}.log"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f"forensics {' '.join(sys.argv[1:])}\n\n" + "".join(traceback.format_exception(err))
        )
    except OSError as save:  # the report must not become a second traceback
        path = Path(f"(not saved: {save.strerror})")
    message = " ".join(f"{type(err).__name__}: {err}".split())[:300]
    make_console(stderr=True, soft_wrap=True).print(
        f"[bold red]internal error:[/] {escape(message)}. This is a bug in forensics, not in "
        f"your input; the traceback is in {escape(str(path))} (attach it to a report)."
    )
    return 3


if __name__ == "__main__":
    main()
