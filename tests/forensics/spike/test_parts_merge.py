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


def test_token_statistics_in_chunks_equal_one_pass(
    small_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The token rule's statistics (forensics.spike.token_signal) read the documents' ids a
    chunk at a time, with the same numbers as all at once."""
    import numpy as np

    import forensics.spike.token_signal as signal

    replayer = open_replayer(load_config(small_run / "forensics.yaml"))
    table = replayer.replay(SMALL.switch_iteration - 20, SMALL.spike_iteration, progress=False)
    docs = table.select("dataset", "doc_id").unique().sort("dataset", "doc_id")
    tokens = replayer.document_tokens(docs)
    baseline = np.arange(docs.height) % 3 == 0
    tokenizer = signal.run_tokenizer(replayer)

    def stats(chunk: int) -> dict[str, np.ndarray]:
        monkeypatch.setattr(signal, "STATS_CHUNK", chunk)
        return signal.document_token_stats(tokenizer, tokens, baseline, replayer.vocab_size())

    whole, chunked = stats(10**9), stats(7)
    assert len(whole["n_tokens"]) == docs.height > 7
    for key, values in whole.items():
        np.testing.assert_array_equal(chunked[key], values, err_msg=key)
