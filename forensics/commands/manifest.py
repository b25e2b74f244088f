"""`forensics manifest`: the provenance table of a Megatron dataset, from its source JSONL."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dataloaders.console import make_console
from dataloaders.megatron.manifest_writer import build_manifest, null_notes
from forensics.errors import ForensicsError
from forensics.outputs import check_output_file


def manifest_command(
    jsonl: Annotated[
        Path, typer.Argument(help="The JSONL preprocess_data.py consumed (line i = document i).")
    ],
    fields: Annotated[
        str,
        typer.Option(
            "--fields", help="Comma-separated fields to keep, e.g. source,url (dots reach nested)."
        ),
    ],
    prefix: Annotated[
        Path | None,
        typer.Option("--prefix", help="The dataset's .bin/.idx prefix: checks the document count."),
    ] = None,
    tokenizer: Annotated[
        Path | None,
        typer.Option(
            "--tokenizer",
            help="The tokenizer preprocess_data.py used (with --prefix): each line's text must "
            "encode to its own document, so swapped lines are refused.",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Output Parquet. Default: PREFIX.manifest.parquet."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace OUT if it exists.")] = False,
) -> None:
    """Build a provenance manifest: doc_id plus the named string columns, one row per document."""
    from rich.markup import escape

    names = [f.strip() for f in fields.split(",") if f.strip()]
    if out is None:
        if prefix is None:
            raise ForensicsError("give --out, or --prefix to write PREFIX.manifest.parquet")
        out = Path(f"{prefix}.manifest.parquet")
    inputs = [jsonl] + ([Path(f"{prefix}.bin"), Path(f"{prefix}.idx")] if prefix else [])
    inputs += [tokenizer] if tokenizer else []
    check_output_file(out, force=force, inputs=inputs, suffix=".parquet")
    table = build_manifest(jsonl, names, out, prefix=prefix, tokenizer=tokenizer)
    console = make_console(stderr=True)
    if prefix is not None and tokenizer is None:
        console.print(
            "[yellow]warning:[/] without --tokenizer each line is matched to its document only "
            "by length (characters per token), so two swapped lines of similar length go unseen; "
            "give --tokenizer to check every line",
            soft_wrap=True,
        )
    for note in null_notes(table):
        console.print(f"[yellow]warning:[/] {escape(note)}", soft_wrap=True)
    console.print(
        f"{table.height} documents, columns {escape(', '.join(table.columns))} "
        f"-> {escape(str(out))}"
    )
