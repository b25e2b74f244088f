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


def read_jsonl_fields(path: Path, fields: list[str], text_key: str = "text") -> pl.DataFrame:
    """doc_id (line number, 0-based) and the named fields of every line, as strings; the
    characters of each line's `text_key` field in the column `_chars` (null without one)."""
    if not path.is_file():
        raise ForensicsError(f"{path}: JSONL file not found")
    if not fields:
        raise ForensicsError("name at least one field to keep (--fields source,url)")
    fields = list(dict.fromkeys(fields))  # `--fields url,url` is one column, not two
    if "doc_id" in fields:
        raise ForensicsError("doc_id is the manifest's own column (the line number)")
    own = [f for f in fields if f in ("doc_tokens", "doc_hash")]
    if own:
        raise ForensicsError(
            f"--fields {own[0]}: the manifest's own column (it ties each row to its document); "
            "keep another field"
        )
    clash = sorted(set(fields) & RESERVED_COLUMNS)
    if clash:
        raise ForensicsError(
            f"--fields {', '.join(clash)}: the replay table has its own column of that name; "
            "keep another field (a manifest column may not be called that)"
        )
    columns: dict[str, list[str | None]] = {f: [] for f in fields}
    chars: list[int | None] = []
    with open(path, encoding="utf-8", errors="strict") as stream:
        try:
            for number, line in enumerate(stream, start=1):
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as err:
                    raise ForensicsError(f"{path}:{number}: not JSON ({err.msg})") from None
                except RecursionError:
                    raise ForensicsError(f"{path}:{number}: JSON nested too deeply") from None
                if not isinstance(record, dict):
                    raise ForensicsError(f"{path}:{number}: expected a JSON object per line")
                for f in fields:
                    columns[f].append(_as_text(_lookup(record, f)))
                text = record.get(text_key)
                chars.append(len(text) if isinstance(text, str) else None)
        except UnicodeDecodeError:
            raise ForensicsError(f"{path}: not UTF-8 text") from None
    count = len(columns[fields[0]])
    missing = [f for f in fields if count and all(v is None for v in columns[f])]
    if missing:
        raise ForensicsError(f"{path}: no line has the field(s) {', '.join(missing)}")
    return pl.DataFrame(
        {"doc_id": pl.Series(range(count), dtype=pl.Int64)}
        | {f: pl.Series(columns[f], dtype=pl.Utf8) for f in fields}
        | {"_chars": pl.Series(chars, dtype=pl.Int64)}
    )


# A document's characters per token stays within a small range for one tokenizer (3-5 for
# English and code with BPE tokenizers); a line paired with another line's document lands far
# outside it. Documents under MIN_TOKENS are too short to say.
RATIO_SPAN = 3.0
MIN_TOKENS = 16


def order_problem(table: pl.DataFrame, tokens: Any, jsonl: Path, prefix: Path) -> str | None:
    """Why the JSONL's lines are not the dataset's documents in order, or None: each line's
    characters against its document's tokens, compared with the median ratio of all lines."""
    import numpy as np

    chars = table["_chars"].to_numpy()
    counts = np.asarray(tokens, dtype=np.float64)
    usable = np.flatnonzero(~np.isnan(chars.astype(np.float64)) & (counts >= MIN_TOKENS))
    if usable.size < 8:
        return None
    ratio = chars[usable].astype(np.float64) / counts[usable]
    median = float(np.median(ratio))
    off = usable[(ratio > median * RATIO_SPAN) | (ratio < median / RATIO_SPAN)]
    if off.size <= max(2, usable.size // 100):
        return None
    i = int(off[0])
    return (
        f"{jsonl}: line {i + 1} has {int(chars[i]):,} characters but document {i} of "
        f"{prefix}.idx has {int(counts[i]):,} tokens, and {off.size:,} of {usable.size:,} lines "
        f"disagree like this (typical: {median:.1f} characters per token): the lines are not in "
        "the order preprocess_data.py read them; nothing was written"
    )


def null_notes(table: pl.DataFrame) -> list[str]:
    """A warning per facet that is null for some documents: those are blamed together as one
    group without a value, which reads like a source of their own."""
    notes = []
    for name in table.columns:
        if name in ("doc_id", "_chars", "doc_tokens", "doc_hash"):
            continue
        nulls = table[name].is_null()
        if nulls.any():
            lines = ", ".join(str(i + 1) for i in nulls.arg_true().head(3).to_list())
            notes.append(
                f"{name} is missing in {int(nulls.sum()):,} of {table.height:,} lines (first: "
                f"line {lines}); those documents have no {name} and are grouped as such"
            )
    return notes


def build_manifest(
    jsonl: Path,
    fields: list[str],
    out: Path,
    *,
    prefix: Path | None = None,
    tokenizer: Path | None = None,
) -> pl.DataFrame:
    """Write the manifest for `jsonl` to `out` (atomically). With `prefix`, the row count must
    equal the dataset's document count, the lines' lengths must follow the documents', and each
    row records its document's doc_tokens and doc_hash, which every reader checks; with
    `tokenizer` too, each line's text must encode to its own document's ids."""
    from dataloaders.atomic import write_parquet_atomic

    table = read_jsonl_fields(jsonl, fields)
    if prefix is not None:
        from dataloaders.megatron.indexed import IndexedDataset
        from dataloaders.megatron.manifests import document_checks

        dataset = IndexedDataset(prefix)
        docs = dataset.num_documents
        if docs != table.height:
            raise ForensicsError(
                f"{jsonl}: {table.height} lines but {prefix}.idx has {docs} documents "
                "(was this the file preprocess_data.py consumed?)"
            )
        problem = order_problem(table, dataset.document_token_counts(), jsonl, prefix)
        if problem:
            raise ForensicsError(problem)
        if tokenizer is not None:
            from forensics.manifest_lines import check_lines

            check_lines(jsonl, dataset, prefix, tokenizer)
        table = pl.concat([table, document_checks(dataset)], how="horizontal")
    elif tokenizer is not None:
        raise ForensicsError("--tokenizer checks each line against its document: give --prefix")
    table = table.drop("_chars")
    write_parquet_atomic(table, out)
    return table
