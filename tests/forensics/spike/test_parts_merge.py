"""Merging decode+score parts (forensics.spike.parts.merge_parts) part by part, texts never
held whole, gives the table one in-process `score_table` gives: template clusters across parts
included."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import forensics.spike.parts as parts
from dataloaders.run_config import load_config
from forensics.replay import open_replayer
from forensics.score import score_table
from forensics_testing.small_run import SMALL


def test_merged_parts_equal_one_table(
    small_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_config(small_run / "forensics.yaml")
    replayer = open_replayer(config)
    table = replayer.replay(SMALL.switch_iteration, SMALL.spike_iteration, progress=False)
    distinct = table.select("dataset", "doc_id").unique().sort("dataset", "doc_id")
    monkeypatch.setattr(parts, "PART_DOCUMENTS", 37)  # parts that cut template clusters apart
    items = parts.plan_parts(distinct, tmp_path / "parts")
    assert len(items) > 3
    for item in items:
        parts.score_part(config, item)
    docs_file, scores_file = tmp_path / "docs.parquet", tmp_path / "scores.parquet"
    parts.merge_parts(items, docs_file, scores_file)

    docs = replayer.documents(distinct, progress=False)
    reference = score_table(docs, "text", progress=False, keys=True)
    merged = pl.read_parquet(scores_file)
    assert (merged["spam_rule"].str.contains("skeleton")).any(), "a template cluster is tested"
    assert merged.equals(reference.select(merged.columns))
    assert pl.read_parquet(docs_file).equals(docs)
