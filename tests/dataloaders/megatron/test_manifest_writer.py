"""Provenance manifests built from the JSONL that preprocess_data.py consumed."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from dataloaders.errors import ForensicsError
from dataloaders.megatron.manifest_writer import build_manifest, read_jsonl_fields


def _jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_fields_nested_and_non_string(tmp_path: Path) -> None:
    src = _jsonl(
        tmp_path / "d.jsonl",
        [
            {"text": "a", "meta": {"source": "cc", "batch": 3}, "url": "u0"},
            {"text": "b", "meta": {"source": "gh"}},
            {"text": "c", "meta": {"source": "cc", "batch": [1, 2]}, "url": None},
        ],
    )
    out = tmp_path / "d.manifest.parquet"
    build_manifest(src, ["meta.source", "meta.batch", "url"], out)
    table = pl.read_parquet(out)
    assert table.columns == ["doc_id", "meta.source", "meta.batch", "url"]
    assert table["doc_id"].to_list() == [0, 1, 2]
    assert table["meta.batch"].to_list() == ["3", None, "[1, 2]"]
    assert table["url"].to_list() == ["u0", None, None]
    assert all(table[c].dtype == pl.Utf8 for c in table.columns[1:])


@pytest.mark.parametrize(
    ("content", "fields", "message"),
    [
        ('{"a": 1}\nnot json\n', ["a"], r"d.jsonl:2: not JSON"),
        ('{"a": 1}\n[1, 2]\n', ["a"], r"d.jsonl:2: expected a JSON object"),
        ('{"a": 1}\n', ["b"], "no line has the field"),
        ('{"a": 1}\n', [], "at least one field"),
        ('{"a": 1}\n', ["doc_id"], "doc_id is the manifest's own column"),
        ('{"dataset": "x"}\n', ["dataset"], "replay table has its own column"),
        ('{"iteration": 3}\n', ["iteration"], "replay table has its own column"),
    ],
)
def test_bad_jsonl(tmp_path: Path, content: str, fields: list[str], message: str) -> None:
    src = tmp_path / "d.jsonl"
    src.write_text(content)
    with pytest.raises(ForensicsError, match=message):
        read_jsonl_fields(src, fields)


def test_missing_jsonl(tmp_path: Path) -> None:
    with pytest.raises(ForensicsError, match="JSONL file not found"):
        build_manifest(tmp_path / "nope.jsonl", ["a"], tmp_path / "m.parquet")
    assert not (tmp_path / "m.parquet").exists()


@pytest.mark.parametrize("column", ["dataset", "iteration", "text", "skipped"])
def test_a_manifest_cannot_replace_replay_columns(tmp_path: Path, column: str) -> None:
    from dataloaders.megatron.manifests import load_manifest

    path = tmp_path / "m.parquet"
    pl.DataFrame({"doc_id": [0, 1], column: ["a", "b"]}).write_parquet(path)
    with pytest.raises(ForensicsError, match=f"manifest column '{column}' would replace"):
        load_manifest(path, 2)


def test_score_names_the_bad_jsonl_line_and_refuses_a_directory(tmp_path: Path) -> None:
    import subprocess
    import sys

    src = tmp_path / "d.jsonl"
    src.write_text('{"text": "hello world"}\nnot json\n')
    (tmp_path / "outdir").mkdir()
    cli = [sys.executable, "-m", "forensics.cli", "score", str(src), "--quiet", "--out"]
    env = {"PATH": "", "COLUMNS": "300"}
    bad = subprocess.run(
        [*cli, str(tmp_path / "o.parquet")], capture_output=True, text=True, env=env
    )
    assert bad.returncode == 2 and f"{src}:2: not a JSON object" in bad.stderr
    folder = subprocess.run(
        [*cli, str(tmp_path / "outdir"), "--force"], capture_output=True, text=True, env=env
    )
    assert folder.returncode == 2 and "is a directory; give a file path" in folder.stderr
