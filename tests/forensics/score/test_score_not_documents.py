"""`forensics score` counts rows that hold no document apart: a null or blank text, or a text
that is only a number (JSONL's `123` and `"123"` read alike), and refuses a table that holds no
document at all."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from typer.testing import CliRunner

from forensics.cli import app
from forensics_testing.refusal import refused


def _jsonl(path: Path, texts: list[object]) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return path


def test_null_blank_and_number_rows_are_counted_apart(tmp_path: Path) -> None:
    texts = [None, 123, "4.5e3", "  ", "a real document about rivers", "another one, on bees"]
    src = _jsonl(tmp_path / "docs.jsonl", texts)
    out = tmp_path / "scored.parquet"
    result = CliRunner().invoke(app, ["score", str(src), "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = " ".join(result.output.split())
    assert summary.startswith(
        "scored 2 documents (4 more rows are not documents, counted apart: 2 null or blank, "
        "2 only a number)"
    ), summary
    assert pl.read_parquet(out).height == len(texts)  # every row kept, scores and all


def test_a_table_of_no_documents_is_refused(tmp_path: Path) -> None:
    src = _jsonl(tmp_path / "ids.jsonl", [None, 7, "12", ""])
    out = tmp_path / "scored.parquet"
    result = CliRunner().invoke(app, ["score", str(src), "--out", str(out)])
    refused(result, "ids.jsonl: no document to score", "null or blank (2)", "only a number (2)")
    assert not out.exists()
