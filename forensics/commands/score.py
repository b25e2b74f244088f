"""`forensics score`: add garbage and spam scores to a Parquet or JSONL table of documents."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from forensics.errors import ForensicsError


def _first_bad_json_line(path: Path) -> tuple[int, str] | None:
    """(line number, problem) of the first line that is not a JSON object, for the message."""
    import json

    with path.open(encoding="utf-8", errors="replace") as stream:
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as err:
                return number, err.msg
            if not isinstance(value, dict):
                return number, f"a JSON {type(value).__name__}"
    return None


def _read_table(path: Path):
    """Read Parquet or JSONL (by suffix, else by sniffing the first byte) as a polars DataFrame."""
    import polars as pl

    if not path.exists():
        raise ForensicsError(f"{path}: no such file")
    if path.is_dir():
        raise ForensicsError(f"{path}: is a directory, expected a .parquet or .jsonl file")
    suffix = "".join(path.suffixes[-1:]).lower()
    with path.open("rb") as fh:
        head = fh.read(4)
    try:
        if suffix == ".parquet" or head == b"PAR1":
            return pl.read_parquet(path)
        if suffix in (".jsonl", ".ndjson", ".json") or head[:1] in (b"{", b"\n", b" "):
            if path.stat().st_size == 0:
                return pl.DataFrame()
            return pl.read_ndjson(path, infer_schema_length=None)
    except (pl.exceptions.PolarsError, OSError, ValueError) as err:
        bad = _first_bad_json_line(path) if suffix != ".parquet" and head != b"PAR1" else None
        if bad is not None:
            raise ForensicsError(f"{path}:{bad[0]}: not a JSON object ({bad[1]})") from None
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ForensicsError(f"{path}: cannot read as {suffix or 'table'}: {first}") from err
    raise ForensicsError(f"{path}: unknown format; expected .parquet or .jsonl")


def score_command(
    input: Annotated[
        Path, typer.Argument(help="Documents as Parquet or JSONL (one JSON per line).")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output Parquet path.")],
    text_column: Annotated[str, typer.Option(help="Column holding the document text.")] = "text",
    force: Annotated[bool, typer.Option(help="Overwrite OUT if it exists.")] = False,
    quiet: Annotated[bool, typer.Option(help="No progress bar or summary.")] = False,
) -> None:
    """Score documents for encoding garbage and template spam.

    OUT keeps every input column and adds garbage_score and spam_score (0-1; 0.5 and above is
    flagged) with a short garbage_reason / spam_reason for flagged rows. Template spam is found
    across all rows of INPUT, so score a whole batch at once.
    """
    from dataloaders.atomic import write_parquet_atomic
    from forensics.outputs import check_output_file
    from forensics.score import FLAG_THRESHOLD, score_table

    check_output_file(out, force=force, inputs=[input])
    df = _read_table(input)
    if df.width == 0:
        raise ForensicsError(f"{input}: no rows or columns to score")
    try:
        scored = score_table(df, text_column, progress=not quiet)
    except ForensicsError as err:
        raise ForensicsError(f"{input}: {err}") from err
    write_parquet_atomic(scored, out, overwrite=True)
    if quiet:
        return
    from dataloaders.console import make_console

    n = scored.height
    g = int((scored["garbage_score"] >= FLAG_THRESHOLD).sum())
    s = int((scored["spam_score"] >= FLAG_THRESHOLD).sum())
    make_console().print(
        f"scored {n:,} documents: {g:,} encoding garbage, {s:,} template spam -> {out}"
    )
