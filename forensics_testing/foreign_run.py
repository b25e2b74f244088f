"""A generated Megatron run whose new crawl batch is dirt no text scorer was built for.

forensics_testing.demo.build writes the run (real .bin/.idx, manifests, byte-level BPE tokenizer,
a mixture switch bringing in `web_v2`); then the dirty crawl batch's documents are rewritten:

- "foreign": clean prose tokenized with *another* tokenizer, a SentencePiece BPE model trained
  here (the `sentencepiece` library's own trainer and encoder) on the run's clean text with a
  vocabulary no larger than the run's. Its ids are valid under the run's tokenizer and decode to
  word salad there: the accident of a dataset preprocessed with the wrong tokenizer.
- "numeric": numeric dumps (rows of floats, integers and hex words, as a table or a tensor
  printed to a file) tokenized with the run's own tokenizer: text that is not language.

Even-numbered dirty documents are foreign, odd ones numeric (`kinds`). Nothing else changes: the
manifests, the document counts and the blend are the demo builder's, so the replay draws the
same documents at the same iterations. truth.json says which documents are which.
"""

from __future__ import annotations

import io
import json
import random
from pathlib import Path
from typing import Any

import numpy as np

from dataloaders.megatron.indexed import IndexedDataset, optimal_dtype, write_indexed_dataset
from forensics_testing.demo.build import DemoSpec, build_run, refresh_manifest_checks

FOREIGN, NUMERIC = "foreign", "numeric"


def numeric_dump(rng: random.Random, rows: int = 24) -> str:
    """A table of numbers as a program prints it: floats, signed integers, exponents, hex."""
    lines = []
    width = rng.randint(4, 9)
    for _ in range(rows):
        cells = []
        for _ in range(width):
            kind = rng.random()
            if kind < 0.5:
                cells.append(f"{rng.uniform(-1000, 1000):.{rng.randint(2, 6)}f}")
            elif kind < 0.7:
                cells.append(f"{rng.uniform(-1, 1):.3e}")
            elif kind < 0.9:
                cells.append(str(rng.randint(-(10**6), 10**6)))
            else:
                cells.append(f"0x{rng.getrandbits(32):08x}")
        lines.append(rng.choice([",", "\t", " "]).join(cells))
    return "\n".join(lines)


def train_sentencepiece(texts: list[str], vocab_size: int) -> Any:
    """A SentencePiece BPE model trained in memory on `texts` (the library's trainer)."""
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=model,
        vocab_size=vocab_size,
        model_type="bpe",
        character_coverage=1.0,
        byte_fallback=True,
        minloglevel=2,
        max_sentence_length=1 << 16,
    )
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def build_foreign_run(out: Path, spec: DemoSpec, *, shuffled: bool = False) -> dict[str, Any]:
    """The demo run with its dirty crawl batch rewritten as foreign-tokenizer ids and numeric
    dumps; returns the truth (also in truth.json) with `kinds`: doc_id -> "foreign"/"numeric".
    `shuffled`: the crawl batch before it (new at the switch too) becomes word salad in the
    run's own tokenizer (each page's words shuffled): dirt that round-trips, with the
    baseline's unigrams and bytes per token, that no rule here sees and the model does."""
    from tokenizers import Tokenizer

    truth = build_run(out, spec, progress=False)
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    eod = tok.token_to_id("<|endoftext|>")
    prose = IndexedDataset(out / "data" / "prose_text_document")
    texts = [tok.decode(prose[i].tolist()) for i in range(prose.sequence_count)]
    sp = train_sentencepiece(texts, min(spec.vocab_size, 1000))
    prefix = out / "data" / "web_v2_text_document"
    web = IndexedDataset(prefix)
    docs = [web[i].tolist() for i in range(web.sequence_count)]
    rng = random.Random(spec.seed + 40)
    kinds: dict[int, str] = {}
    for n, doc_id in enumerate(truth["dirty_doc_ids"]):
        if n % 2 == 0:
            ids = sp.encode(rng.choice(texts))
            kinds[doc_id] = FOREIGN
        else:
            ids = tok.encode(numeric_dump(rng)).ids
            kinds[doc_id] = NUMERIC
        docs[doc_id] = list(ids) + [eod]
    del web  # the memory maps close before the files are replaced
    write_indexed_dataset(
        prefix, (np.asarray(d) for d in docs), optimal_dtype(tok.get_vocab_size())
    )
    if shuffled:
        truth["shuffled_crawl_batch"], truth["shuffled_doc_ids"] = shuffle_batch(out, tok, rng)
    refresh_manifest_checks(out)
    truth["dirty_kind"] = "foreign+numeric"
    truth["kinds"] = {str(k): v for k, v in kinds.items()}
    truth["dirty_what"] = {FOREIGN: sum(v == FOREIGN for v in kinds.values()),
                           NUMERIC: sum(v == NUMERIC for v in kinds.values())}  # fmt: skip
    (out / "truth.json").write_text(json.dumps(truth, indent=1))
    return truth


def shuffle_batch(out: Path, tok: Any, rng: random.Random) -> tuple[str, list[int]]:
    """Rewrite the second-to-last crawl batch of web_v2 (clean, new at the switch) with each
    document's words shuffled, tokenized by the run's tokenizer; (its name, its doc_ids)."""
    import polars as pl

    manifest = pl.read_parquet(out / "data" / "web_v2.manifest.parquet")
    batches = sorted(b for b in manifest["crawl_batch"].unique().to_list() if b)
    name = batches[-2]
    ids = manifest.filter(pl.col("crawl_batch") == name)["doc_id"].to_list()
    prefix = out / "data" / "web_v2_text_document"
    web = IndexedDataset(prefix)
    docs = [web[i].tolist() for i in range(web.sequence_count)]
    del web
    eod = tok.token_to_id("<|endoftext|>")
    for doc_id in ids:
        words = tok.decode(docs[doc_id][:-1]).split()
        rng.shuffle(words)
        docs[doc_id] = tok.encode(" ".join(words)).ids + [eod]
    write_indexed_dataset(
        prefix, (np.asarray(d) for d in docs), optimal_dtype(tok.get_vocab_size())
    )
    return name, ids
