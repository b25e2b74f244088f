"""`forensics spike` on a Megatron run tokenized with a SentencePiece `.model` (byte fallback).

The run is the small generated run (forensics_testing/small_run.py) re-tokenized the way a
SentencePiece run
is made: a model trained with sentencepiece's own trainer (byte_fallback=True), the documents
encoded by megatron-core 0.16.1's tokenizer built from `--tokenizer-type
GPTSentencePieceTokenizer --tokenizer-model`, and the .bin/.idx written by megatron-core's own
`IndexedDatasetBuilder`. The config names the `.model` file and the launch flags; every decoded
document the spike read must be megatron-core's own decoding of the same ids.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

from forensics_testing.small_run import SMALL, SPIKE_ARGS, cli

pytest.importorskip("megatron.core")
sentencepiece = pytest.importorskip("sentencepiece")

FLAGS = {
    "tokenizer_type": "GPTSentencePieceTokenizer",
    "tokenizer_sentencepiece_legacy": False,
    "tokenizer_special_tokens": None,
    "tokenizer_metadata": None,
}


def _retokenize(run: Path) -> object:
    """Train a byte-fallback SentencePiece model on the clean documents, rewrite every dataset
    with megatron-core's tokenizer and writer; returns megatron-core's tokenizer."""
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
    from megatron.core.tokenizers.text.utils.build_tokenizer import build_tokenizer

    from forensics_testing.demo.build import _documents, refresh_manifest_checks

    datasets = _documents(SMALL)
    clean = [d.text for docs in datasets.values() for d in docs if d.dirty is None]
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(line for text in clean for line in text.splitlines() if line),
        model_prefix=str(run / "tok"),
        vocab_size=1200,
        byte_fallback=True,
        model_type="bpe",
        minloglevel=2,
    )
    tok = build_tokenizer(argparse.Namespace(tokenizer_model=str(run / "tok.model"), **FLAGS))
    for name, docs in datasets.items():
        prefix = run / "data" / f"{name}_text_document"
        builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=np.uint16)
        for doc in docs:
            builder.add_item(torch.tensor([*tok.tokenize(doc.text), tok.eod], dtype=torch.int64))
            builder.end_document()
        builder.finalize(f"{prefix}.idx")
    cfg = yaml.safe_load((run / "forensics.yaml").read_text(encoding="utf-8"))
    cfg["tokenizer"] = "tok.model"
    cfg["tokenizer_args"] = {"tokenizer_type": FLAGS["tokenizer_type"]}
    (run / "forensics.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    (run / "tokenizer.json").unlink()
    refresh_manifest_checks(run)
    return tok


def test_spike_on_a_sentencepiece_run(tmp_path: Path) -> None:
    from forensics_testing.demo.build import build_run

    run = tmp_path / "run"
    truth = build_run(run, SMALL, progress=False)
    tok = _retokenize(run)
    proc = cli("spike", "--config", str(run / "forensics.yaml"), *SPIKE_ARGS, "--out",
               str(run / "spike"), "--quiet", timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    replay = pl.read_parquet(next((run / "spike" / ".cache").glob("replay-*.parquet")))
    assert replay.height > 0
    from dataloaders.run_config import load_config
    from forensics.replay import open_replayer

    replayer = open_replayer(load_config(run / "forensics.yaml"))
    docs = replay.select("dataset", "doc_id").unique().sort("dataset", "doc_id").head(400)
    decoded = replayer.documents(docs, progress=False)
    ids = [replayer._doc_tokens(n, d) for n, d in decoded.select("dataset", "doc_id").rows()]
    assert decoded["text"].to_list() == [tok.detokenize(x) for x in ids]
    byte_docs = [x for x in ids if any(3 <= t < 259 for t in x)]  # <0x00>..<0xFF> pieces
    assert byte_docs, "no document of the window holds byte-fallback pieces"
    windows = [x[s : s + w] for x in byte_docs[:20] for w in (1, 2, 5) for s in range(len(x))]
    assert replayer._decode(windows) == [tok.detokenize(w) for w in windows]
    assert "\ufffd" in "".join(replayer._decode(windows)), "no segment cut a character"
    culprit = (run / "spike" / "report.md").read_text(encoding="utf-8")
    assert truth["dirty_crawl_batch"] in culprit
