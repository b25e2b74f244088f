"""`forensics score`: add garbage and spam scores to a Parquet or JSONL table of documents."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dataloaders.atomic import write_parquet_atomic
from dataloaders.console import make_console
from forensics.errors import ForensicsError
from forensics.outputs import check_output_file
from forensics.score import FLAG_THRESHOLD, score_table


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


# A value that is only a number ("123", "-4.5e3"): a JSON number read as text, or a stray id;
# scored like any text, but not counted as a document.
_NUMBER = r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$"


def _not_documents(df, text_column: str) -> tuple[int, int]:  # noqa: ANN001 - a polars frame
    """(rows with no text: null or blank, rows whose text is only a number). JSONL's `123` and
    `"123"` read alike (polars reads a mixed column as text), so both count as a number."""
    import polars as pl

    if text_column not in df.columns:
        return 0, 0  # score_table names the missing column
    column = df[text_column]
    if column.dtype.is_numeric():
        return column.null_count(), column.len() - column.null_count()
    if column.dtype != pl.Utf8:
        return column.null_count(), 0
    blank = int((column.is_null() | (column.str.strip_chars() == "")).sum())
    number = int(column.str.contains(_NUMBER).fill_null(False).sum())
    return blank, number


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
    check_output_file(out, force=force, inputs=[input])
    df = _read_table(input)
    if df.width == 0:
        raise ForensicsError(f"{input}: no rows or columns to score")
    blank, number = _not_documents(df, text_column)
    if df.height and blank + number == df.height:
        raise ForensicsError(
            f"{input}: no document to score: the {df.height:,} rows' {text_column!r} values are "
            f"null or blank ({blank:,}) or only a number ({number:,})"
        )
    try:
        scored = score_table(df, text_column, progress=not quiet)
    except ForensicsError as err:
        raise ForensicsError(f"{input}: {err}") from err
    write_parquet_atomic(scored, out, overwrite=True)
    if quiet:
        return

    n = scored.height - blank - number
    g = int((scored["garbage_score"] >= FLAG_THRESHOLD).sum())
    s = int((scored["spam_score"] >= FLAG_THRESHOLD).sum())
    apart = ""
    if blank or number:
        apart = (
            f" ({blank + number:,} more rows are not documents, counted apart: {blank:,} null "
            f"or blank, {number:,} only a number)"
        )
    make_console().print(
        f"scored {n:,} documents{apart}: {g:,} encoding garbage, {s:,} template spam -> {out}",
        markup=False,
        highlight=False,
    )
