"""`forensics rebuild`: the spike's block list removed from the data, and the restart's blend.

Its dependencies are imported at the top; nothing heavy (torch, `datasets`) loads on import.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from dataloaders.storage import fetched
from forensics.commands.options import ConfigOption, FromCheckpointOption, MegatronArgsOption
from forensics.from_checkpoint import step_of_skip_file
from forensics.rebuild import run_rebuild
from forensics.rebuild.launches import paste_form
from forensics.report.terminal import make_console
from forensics.run_source import resolve_run_config


def rebuild_command(
    spike_dir: Annotated[
        Path,
        typer.Argument(help="A forensics spike output directory (its skip.json), or the file."),
    ],
    config: ConfigOption = None,
    megatron_args: MegatronArgsOption = None,
    from_checkpoint: FromCheckpointOption = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Output directory. Default: rebuild-<step>/ beside SPIKE_DIR."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace an earlier rebuild's files in --out.")
    ] = False,
    keep: Annotated[
        str,
        typer.Option(
            "--keep",
            help="A rebuilt dataset's weight: 'share' keeps its blend weight (its remaining "
            "documents are drawn more often), 'passes' lowers it with the tokens removed (each "
            "remaining document is drawn as often as before; the others fill the difference).",
        ),
    ] = "share",
    upload_to: Annotated[
        str | None,
        typer.Option(
            "--upload-to",
            help="Megatron: also upload the filtered .bin/.idx under this s3:// prefix; the "
            "restart's --data-path and the rebuilt config then name them there.",
        ),
    ] = None,
) -> None:
    """Write each blocked dataset without the block list's documents (.bin/.idx + manifest), the
    restart's --data-path and a config that replays the new order (Megatron); for Hugging Face,
    OLMo-core and MosaicML streaming runs, the config without the blocked files (whole files only:
    part of a file is refused) and the restart's new file list."""
    from rich.markup import escape

    skip_file = spike_dir / "skip.json" if spike_dir.is_dir() else spike_dir

    step = step_of_skip_file(skip_file) if from_checkpoint is not None else None
    run = resolve_run_config(config, megatron_args, from_checkpoint, step)
    result = run_rebuild(skip_file, run, out, force=force, keep=keep, upload_to=upload_to)
    console = make_console()

    if fetched.line():
        console.print(escape(fetched.line() or ""), soft_wrap=True)
    for note in result.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
    if "files_removed" in result.summary:
        show_file_rebuild(console, result)
        return
    for name, row in result.counts.items():
        console.print(
            f"[green]rebuilt[/] {escape(name)}: {row['documents_removed']:,} documents removed "
            f"({100 * row['share_of_tokens_removed']:.1f}% of its tokens), "
            f"{row['documents_kept']:,} kept -> {escape(row['rebuilt'])}.bin/.idx",
            soft_wrap=True,
        )
    show_launches(console, result)


def show_launches(console: Any, result: Any) -> None:
    """The restart, one launch per data stage from the rollback on, each with its flags file
    (the whole line, shell-quoted, for $(cat FILE)), then the recipe and the order notes."""
    from rich.markup import escape

    summary = result.summary
    launches = summary["launches"]
    console.print(f"restart from checkpoint iteration {summary['rollback_iteration']}:")
    for i, launch in enumerate(launches):
        if len(launches) > 1:
            console.print(f"launch {i + 1}, {escape(launch['what'])}:", soft_wrap=True)
        if launch["load_instruction"]:
            console.print(f"  load the checkpoint: {escape(launch['load_instruction'])}")
        paste = paste_form(str(result.out / launch["file"]), launch["flags"])
        console.print(f"  {escape(paste)}", soft_wrap=True, highlight=False)
        console.print("  " + escape(launch["flags"]), soft_wrap=True, highlight=False)
    notes = summary["notes"]
    recipe = next((n for n in notes if n.startswith("Chosen: --keep")), None)
    for note in [notes[0], *([recipe] if recipe else [])]:
        console.print(f"[bold]note[/]: {escape(note)}", soft_wrap=True)
    console.print(f"details: {escape(str(result.out / 'rebuild.md'))}")


def show_file_rebuild(console: Any, result: Any) -> None:
    """The terminal lines of a file-based rebuild: each file removed, the restart lines."""
    from rich.markup import escape

    summary = result.summary
    for row in summary["files_removed"]:
        console.print(
            f"[green]removed[/] {escape(row['file'])} ({row['documents']:,} documents of "
            f"{escape(row['dataset'])})",
            soft_wrap=True,
        )
    console.print(f"restart from checkpoint iteration {summary['rollback_iteration']} with:")
    for name, text in summary["restart"].items():
        console.print(f"{escape(str(result.out / name))}:", soft_wrap=True)
        console.print(escape(text), soft_wrap=True, highlight=False)
    if summary["load_rollback_checkpoint"]:
        console.print(f"load the checkpoint: {escape(summary['load_rollback_checkpoint'])}")
    console.print(f"[bold]note[/]: {escape(summary['notes'][0])}", soft_wrap=True)
    console.print(f"details: {escape(str(result.out / 'rebuild.md'))}")
