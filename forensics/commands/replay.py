"""`forensics replay`: which documents did iterations S-W+1 .. S consume, as a Parquet table.

Its dependencies are imported at the top; a family's replayer (and `datasets` for HF runs)
loads when the command opens it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from dataloaders.atomic import write_parquet_atomic
from dataloaders.console import make_console
from dataloaders.storage import fetched
from forensics.commands.options import ConfigOption, FromCheckpointOption, MegatronArgsOption
from forensics.errors import ForensicsError
from forensics.outputs import check_output_file, run_inputs
from forensics.replay import open_replayer
from forensics.rescore.export import check_export_target, require_megatron, write_export
from forensics.run_source import resolve_run_config
from forensics.skip import json_fingerprint
from forensics.spike.tokcheck import check_tokenizer
from forensics.window import check_window


def replay_command(
    step: Annotated[int, typer.Option("--step", help="Last iteration of the window (1-indexed).")],
    out: Annotated[Path, typer.Option("--out", help="Output Parquet file (replay table).")],
    window: Annotated[
        int, typer.Option("--window", help="Iterations to replay: STEP-WINDOW+1 .. STEP.")
    ] = 1,
    config: ConfigOption = None,
    megatron_args: MegatronArgsOption = None,
    from_checkpoint: FromCheckpointOption = None,
    text: Annotated[
        bool,
        typer.Option("--text", help="Add the decoded text of every segment (needs tokenizer)."),
    ] = False,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Progress bars.")
    ] = True,
    force: Annotated[
        bool, typer.Option("--force", help="Replace OUT (and a --tokens export) if it exists.")
    ] = False,
    tokens: Annotated[
        Path | None,
        typer.Option(
            "--tokens",
            help="Also write the exact token sequences (seq_length+1 per sample) to this "
            "directory: tokens.npy, samples.parquet, segments.parquet, meta.json.",
        ),
    ] = None,
) -> None:
    """Replay the run's data order: one row per (iteration, batch position, document segment)."""
    from rich.markup import escape

    if out.suffix != ".parquet":
        raise ForensicsError(f"{out}: --out must be a .parquet file")
    run = resolve_run_config(config, megatron_args, from_checkpoint, step)
    check_output_file(out, force=force, inputs=run_inputs(run), suffix=".parquet")
    replayer = open_replayer(run)
    first, last = check_window(replayer, step, window)
    if tokens is not None:  # refuse before the replay: a wrong path costs nothing
        require_megatron(replayer)
        check_export_target(tokens, force)
    table = replayer.replay(first, last, text=text, progress=progress)
    if text:  # decoded with a tokenizer that is not the data's, every text is fluent nonsense
        drawn = table.select("dataset", "doc_id").unique(maintain_order=True)
        check_tokenizer(replayer, drawn, run.tokenizer)
    write_parquet_atomic(table, out, overwrite=True)
    console = make_console(stderr=True)
    if tokens is not None:
        fingerprint = json_fingerprint(replayer)
        meta = {"step": step, "window": [first, last], "fingerprint": fingerprint}
        info = write_export(replayer, table, tokens, meta, force=force, progress=progress)
        console.print(
            f"tokens: {info['samples']} samples x {info['sample_length']} -> {escape(str(tokens))}"
        )
    _save_index_cache(replayer, console, progress)
    samples = table.select("sample_index").n_unique()
    console.print(
        f"iterations {first}-{last}: {samples} samples, {table.height} document segments "
        f"-> {escape(str(out))}"
    )

    if fetched.line():
        console.print(escape(fetched.line() or ""))


def _save_index_cache(replayer: Any, console: Any, progress: bool) -> None:
    """Warm our index cache for the next replay (after the output is safe)."""
    if not replayer.index_cache:
        return
    if progress:
        with console.status("saving the index cache"):
            replayer.save_cache()
    else:
        replayer.save_cache()
