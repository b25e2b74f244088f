"""A generated Megatron run with dirty stretches planted ahead at known iterations (tests, bench).

What is real: the clean text (harvested from the installed packages, demo.texts; every page,
those the scorers flag too, so a test sees the scorers' false positives), the dirty pages
(demo.dirty: mojibake, template spam; plus pages carrying a repeated token n-gram in OLMo 2's
`g4ODg4OD` style), a byte-level BPE trained here, the `.bin/.idx` files (the shared writer),
manifests and the run config. How the stretches are planted: the run's blend has data stages; a
dirty dataset joins the blend at a stage start and leaves at the next, so every dirty document
lands in exactly the iterations of its stretch, and no other.

`tokens_target` grows the clean dataset by recombining token arrays of the pool (no encoding per
document), so a benchmark run of a billion tokens is a few array writes, not hours of BPE.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dataloaders.megatron.indexed import IndexedDataset, optimal_dtype, write_indexed_dataset
from dataloaders.megatron.manifests import document_checks
from forensics_testing.demo.dirty import mojibake, site_name, spam_page, web_page
from forensics_testing.demo.texts import harvest

EOD = "<|endoftext|>"
NGRAM_UNITS = ("g4OD", "\u2581|", "=-", "ab", "\u65e5\u672c", "..")


@dataclass(frozen=True)
class ScanRunSpec:
    """Shape of a generated run. `stretches`: (dirty kind, first iteration, last iteration)."""

    seed: int = 7
    seq_length: int = 128
    global_batch_size: int = 16
    train_iters: int = 120
    clean_docs: int = 600
    dirty_docs: int = 60
    dirty_weight: float = 0.6
    stretches: tuple[tuple[str, int, int], ...] = (
        ("mojibake", 21, 30),
        ("spam", 51, 60),
        ("ngram", 91, 98),
    )
    vocab_size: int = 3000
    tokens_target: int = 0  # grow the clean dataset to about this many tokens (0: as harvested)
    extra: dict[str, Any] = field(default_factory=dict)


def _dirty_pages(kind: str, n: int, clean: list[str], seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        body = clean[i % len(clean)]
        if kind == "mojibake":
            out.append(mojibake(web_page(body, site_name(rng), rng), rng))
        elif kind == "spam":
            out.append(spam_page(rng))
        elif kind == "ngram":
            unit = NGRAM_UNITS[i % len(NGRAM_UNITS)]
            cut = len(body) // 2
            out.append(body[:cut] + " " + unit * rng.randint(80, 160) + " " + body[cut:])
        else:
            raise ValueError(f"unknown dirty kind {kind!r}")
    return out


def build_scan_run(out: Path, spec: ScanRunSpec | None = None) -> dict[str, Any]:
    """Write the run under `out` (forensics.yaml, tokenizer.json, data/); returns the truth."""
    import yaml

    spec = spec or ScanRunSpec()
    out = Path(out)
    (out / "data").mkdir(parents=True, exist_ok=True)
    clean, dirty = _texts(spec)
    encode = _train_tokenizer(clean, spec, out / "tokenizer.json")
    n_clean = _write_clean(encode(clean), spec, out / "data")
    dirty_ids = _write_dirty(dirty, encode, out / "data")
    config = {
        "name": "scan-synthetic",
        "data": {
            "format": "megatron",
            "seed": spec.seed,
            "seq_length": spec.seq_length,
            "split": "100,0,0",
            "stages": _stages(spec),
        },
        "training": {
            "global_batch_size": spec.global_batch_size,
            "train_iters": spec.train_iters,
        },
        "tokenizer": "tokenizer.json",
    }
    (out / "forensics.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    truth = {
        "spec": asdict(spec),
        "stretches": [list(s) for s in spec.stretches],
        "dirty_documents": dirty_ids,
        "clean_documents": n_clean,
        "config": str(out / "forensics.yaml"),
    }
    (out / "truth.json").write_text(json.dumps(truth, indent=2))
    return truth


def _texts(spec: ScanRunSpec) -> tuple[list[str], dict[str, list[str]]]:
    """(clean documents, dirty documents by kind), from the harvest."""
    found = harvest(spec.clean_docs + spec.dirty_docs, 0, seed=spec.seed)["prose"]
    clean = [t.text for t in found[: spec.clean_docs]]
    # Dirty pages wrap texts the clean dataset does not hold: a near-copy of a clean document
    # would make that clean document look like template spam next to it.
    bodies = [t.text for t in found[spec.clean_docs : spec.clean_docs + spec.dirty_docs]]
    if len(clean) < 50 or not bodies:
        raise RuntimeError("too little text on this machine to generate a run")
    kinds = sorted({k for k, _, _ in spec.stretches})
    dirty = {
        k: _dirty_pages(k, spec.dirty_docs, bodies, spec.seed + i) for i, k in enumerate(kinds)
    }
    return clean, dirty


def _train_tokenizer(
    clean: list[str], spec: ScanRunSpec, path: Path
) -> Callable[[list[str]], list[np.ndarray]]:
    """A byte-level BPE trained on the clean text, saved to `path`; returns the encoder (token
    arrays with EOD appended, in the smallest dtype the vocabulary fits)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=[EOD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(clean[:2000], trainer=trainer)
    tok.save(str(path))
    eod = tok.token_to_id(EOD)
    dtype = optimal_dtype(tok.get_vocab_size())

    def encode(texts: list[str]) -> list[np.ndarray]:
        return [np.asarray(e.ids + [eod], dtype=dtype) for e in tok.encode_batch(texts)]

    return encode


def _write_clean(clean_tokens: list[np.ndarray], spec: ScanRunSpec, data: Path) -> int:
    """The clean dataset and its manifest, grown to `spec.tokens_target`; returns its size."""
    import polars as pl

    dtype = clean_tokens[0].dtype
    rng = np.random.default_rng(spec.seed)
    n_clean = len(clean_tokens)
    total = sum(len(t) for t in clean_tokens)
    if spec.tokens_target > total:
        n_clean = int(spec.tokens_target / (total / len(clean_tokens)))

    def clean_stream():
        for i in range(n_clean):
            if i < len(clean_tokens):
                yield clean_tokens[i]
            else:  # a new document: the halves of two pool documents
                a, b = rng.integers(0, len(clean_tokens), size=2)
                ta, tb = clean_tokens[a], clean_tokens[b]
                yield np.concatenate([ta[: len(ta) // 2], tb[len(tb) // 2 :]])

    write_indexed_dataset(data / "clean_text_document", clean_stream(), dtype)
    _manifest(data / "clean.manifest.parquet", n_clean, "clean", pl)
    return n_clean


def _write_dirty(
    dirty: dict[str, list[str]], encode: Callable[[list[str]], list[np.ndarray]], data: Path
) -> dict[str, int]:
    """One dataset and manifest per dirty kind; returns each one's number of documents."""
    import polars as pl

    dirty_ids: dict[str, int] = {}
    for kind, texts in dirty.items():
        tokens = encode(texts)
        dtype = tokens[0].dtype
        write_indexed_dataset(data / f"{kind}_text_document", iter(tokens), dtype)
        _manifest(data / f"{kind}.manifest.parquet", len(tokens), f"dirty-{kind}", pl)
        dirty_ids[kind] = len(tokens)
    return dirty_ids


def _stages(spec: ScanRunSpec) -> list[dict[str, Any]]:
    """The data stages: clean alone, each dirty dataset joining at its stretch's first
    iteration and leaving after its last."""

    def blend(names: list[str]) -> list[dict[str, Any]]:
        w = {n: (spec.dirty_weight if n != "clean" else 1.0 - spec.dirty_weight) for n in names}
        if names == ["clean"]:
            w = {"clean": 1.0}
        return [
            {
                "name": n,
                "prefix": f"data/{n}_text_document",
                "weight": w[n],
                "manifest": f"data/{n}.manifest.parquet",
            }
            for n in names
        ]

    stages = [{"start_iteration": 1, "blend": blend(["clean"])}]
    for kind, first, last in sorted(spec.stretches, key=lambda s: s[1]):
        stages.append({"start_iteration": first, "blend": blend(["clean", kind])})
        if last < spec.train_iters:
            stages.append({"start_iteration": last + 1, "blend": blend(["clean"])})
    return stages


def _manifest(path: Path, n: int, source: str, pl: Any) -> None:
    """One row per document: the source (what the report ranks) and a crawl batch, then the
    doc_tokens and doc_hash `forensics manifest --prefix` writes (of the dataset beside it)."""
    table = pl.DataFrame(
        {
            "doc_id": pl.Series(range(n), dtype=pl.Int64),
            "source": pl.Series([source] * n, dtype=pl.Utf8),
            "crawl_batch": pl.Series([f"{source}-b{i % 4}" for i in range(n)], dtype=pl.Utf8),
        }
    )
    prefix = path.with_name(path.name.replace(".manifest.parquet", "_text_document"))
    table = pl.concat([table, document_checks(IndexedDataset(prefix))], how="horizontal")
    table.write_parquet(path)
