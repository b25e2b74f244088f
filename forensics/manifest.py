"""Provenance manifests: one Parquet row per document of a Megatron dataset, in .idx order.

Megatron's preprocess_data.py turns line i of its JSONL input into document i of the .bin/.idx
(every line becomes a document, even an empty one), so the JSONL's metadata fields, read in
order, say where each document came from: `doc_id` plus the string columns the user keeps
(source, crawl_batch, url, domain, file ...). Dotted names reach into nested objects
(`meta.source`). The replay table carries these columns; clustering by source uses them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from dataloaders.base import RESERVED_COLUMNS
from forensics.errors import ForensicsError


def _lookup(record: dict[str, Any], field: str) -> Any:
    value: Any = record
    for part in field.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _as_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return str(value)


def read_jsonl_fields(path: Path, fields: list[str]) -> pl.DataFrame:
    """doc_id (line number, 0-based) and the named fields of every line, as strings."""
    if not path.is_file():
        raise ForensicsError(f"{path}: JSONL file not found")
    if not fields:
        raise ForensicsError("name at least one field to keep (--fields source,url)")
    fields = list(dict.fromkeys(fields))  # `--fields url,url` is one column, not two
    if "doc_id" in fields:
        raise ForensicsError("doc_id is the manifest's own column (the line number)")
    clash = sorted(set(fields) & RESERVED_COLUMNS)
    if clash:
        raise ForensicsError(
            f"--fields {', '.join(clash)}: the replay table has its own column of that name; "
            "keep another field (a manifest column may not be called that)"
        )
    columns: dict[str, list[str | None]] = {f: [] for f in fields}
    with open(path, encoding="utf-8", errors="strict") as stream:
        try:
            for number, line in enumerate(stream, start=1):
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as err:
                    raise ForensicsError(f"{path}:{number}: not JSON ({err.msg})") from None
                if not isinstance(record, dict):
                    raise ForensicsError(f"{path}:{number}: expected a JSON object per line")
                for f in fields:
                    columns[f].append(_as_text(_lookup(record, f)))
        except UnicodeDecodeError:
            raise ForensicsError(f"{path}: not UTF-8 text") from None
    count = len(columns[fields[0]])
    missing = [f for f in fields if count and all(v is None for v in columns[f])]
    if missing:
        raise ForensicsError(f"{path}: no line has the field(s) {', '.join(missing)}")
    return pl.DataFrame(
        {"doc_id": pl.Series(range(count), dtype=pl.Int64)}
        | {f: pl.Series(columns[f], dtype=pl.Utf8) for f in fields}
    )


def build_manifest(
    jsonl: Path, fields: list[str], out: Path, *, prefix: Path | None = None
) -> pl.DataFrame:
    """Write the manifest for `jsonl` to `out` (atomically); with `prefix`, the row count must
    equal the dataset's document count."""
    from dataloaders.atomic import write_parquet_atomic

    table = read_jsonl_fields(jsonl, fields)
    if prefix is not None:
        from dataloaders.megatron.indexed import IndexedDataset

        docs = IndexedDataset(prefix).num_documents
        if docs != table.height:
            raise ForensicsError(
                f"{jsonl}: {table.height} lines but {prefix}.idx has {docs} documents "
                "(was this the file preprocess_data.py consumed?)"
            )
    write_parquet_atomic(table, out)
    return table
