"""A benchmark run whose window documents are mostly distinct, built cheaply from a small one.

A real pretraining window draws almost every document once. The bench run (scripts/bench_spike.py)
has 112k documents, so a production-shape window of 1.26B tokens reuses each many times. This
module derives, from that run, a run with as many documents as its training needs, so that each
is drawn about once: every new document is COMPONENTS whole documents of the base run, from the
same dataset and the same crawl batch (a dirty crawl batch stays dirty, a clean one clean),
joined token for token (each component's end-of-document token dropped but the last's). Whole
documents, never cut: a cut inside a byte-level BPE token sequence could split a UTF-8 character
and read as mojibake to the garbage scorer. Two new documents share a component now and then
(about COMPONENTS x new / base times per base document), never all of them.

Cheap in memory and time: the `.bin` is written with numpy gathers in chunks of CHUNK_DOCUMENTS
documents, the `.idx` with the project's `write_idx` (megatron-core's format, tested against it
in tests/dataloaders/megatron), the manifest with polars expressions (its facets are the first
component's; the url made unique per document). The manifest carries doc_tokens but not
doc_hash (optional; a per-document hash in Python would cost minutes at this size).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dataloaders.atomic import write_parquet_atomic
from dataloaders.megatron.indexed import IndexedDataset, bin_path, idx_path, write_idx
from forensics.spike.census import census_file
from forensics.spike.run_context import open_run
from forensics_testing.demo.build import DemoSpec, config_dict, megatron_log_lines

COMPONENTS = 3  # base documents per new document
CHUNK_DOCUMENTS = 50_000  # new documents gathered and written at a time (~250 MB of indices)
HEADROOM = 1.15  # tokens written per token the run's training can draw from a dataset


def needed_tokens(spec: DemoSpec, name: str) -> int:
    """Tokens dataset `name` must hold so that the whole training draws each document about
    once: its largest blend weight times the run's tokens, with headroom (Megatron sizes each
    dataset's samples by weight x samples x 1.005, and the split keeps 98% for training)."""
    weight = max(spec.blend_before.get(name, 0.0), spec.blend_after.get(name, 0.0))
    total = spec.train_iters * spec.global_batch_size * (spec.seq_length + 1)
    return int(weight * total * HEADROOM / 0.98)


def compose(groups: np.ndarray, n: int, seed: int) -> np.ndarray:
    """int64[n, COMPONENTS]: base documents of each new document. The first cycles through
    every base document; the others are drawn at random from the first's group."""
    rng = np.random.default_rng(seed)
    base = len(groups)
    first = rng.permutation(np.resize(np.arange(base), n)) if n else np.zeros(0, np.int64)
    order = np.argsort(groups, kind="stable")
    codes, starts, sizes = np.unique(groups[order], return_index=True, return_counts=True)
    where = np.searchsorted(codes, groups[first])
    picks = [first]
    for _ in range(COMPONENTS - 1):
        offset = (rng.random(n) * sizes[where]).astype(np.int64)
        picks.append(order[starts[where] + offset])
    return np.stack(picks, axis=1).astype(np.int64)


def write_dataset(base: IndexedDataset, parts: np.ndarray, prefix: Path) -> np.ndarray:
    """Write the new documents (`parts`: their base components) as `prefix`.bin/.idx, in
    chunks; returns their token counts."""
    tokens = np.asarray(base.tokens)
    starts = np.asarray(base.sequence_pointers, dtype=np.int64)[base.document_indices[:-1]]
    starts //= base.dtype.itemsize
    counts = base.document_token_counts()
    lengths = np.zeros(len(parts), dtype=np.int64)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    tmp = bin_path(prefix).with_name(bin_path(prefix).name + ".tmp")
    with open(tmp, "wb") as out:
        for lo in range(0, len(parts), CHUNK_DOCUMENTS):
            chunk = parts[lo : lo + CHUNK_DOCUMENTS]
            take = counts[chunk].copy()
            take[:, :-1] -= 1  # the end-of-document token of all but the last component
            flat, runs = starts[chunk].ravel(), take.ravel()
            begin = np.cumsum(runs) - runs
            index = np.repeat(flat - begin, runs) + np.arange(int(runs.sum()))
            out.write(tokens[index].astype(base.dtype, copy=False).tobytes())
            lengths[lo : lo + len(chunk)] = take.sum(axis=1)
    write_idx(idx_path(prefix), lengths, np.arange(len(parts) + 1), base.dtype)
    os.replace(tmp, bin_path(prefix))
    return lengths


def write_manifest(base_manifest: Path, parts: np.ndarray, lengths: np.ndarray, path: Path) -> None:
    """The new documents' manifest: the first component's facets, a url of its own each."""
    facets = pl.read_parquet(base_manifest).sort("doc_id")
    keep = [c for c in ("source", "crawl_batch", "domain", "url") if c in facets.columns]
    table = facets.select(keep)[parts[:, 0]].with_row_index("doc_id")
    table = table.with_columns(
        pl.col("doc_id").cast(pl.Int64),
        (pl.col("url") + "#d" + pl.col("doc_id").cast(pl.Utf8)).alias("url"),
        pl.Series("doc_tokens", lengths, dtype=pl.Int64),
    )
    write_parquet_atomic(table, path)


def build_distinct_run(base: Path, spec: DemoSpec, run: Path) -> dict[str, Any]:
    """`run`: `spec`'s config, log and checkpoints over datasets derived from `base` (a bench
    run) so that each document is drawn about once. Returns the truth (also truth.json)."""
    import yaml

    t0 = time.perf_counter()
    if run.exists():
        shutil.rmtree(run)
    truth = json.loads((base / "truth.json").read_text())
    documents: dict[str, int] = {}
    token_counts: dict[str, int] = {}
    for k, name in enumerate(sorted(truth["documents"])):
        ds = IndexedDataset(base / "data" / f"{name}_text_document")
        manifest = base / "data" / f"{name}.manifest.parquet"
        groups = pl.read_parquet(manifest).sort("doc_id")["crawl_batch"].fill_null("")
        codes = groups.cast(pl.Categorical).to_physical().to_numpy().astype(np.int64)
        mean = float(ds.document_token_counts().mean()) * COMPONENTS
        n = max(ds.num_documents, int(needed_tokens(spec, name) / mean) + 1)
        parts = compose(codes, n, spec.seed + k)
        lengths = write_dataset(ds, parts, run / "data" / f"{name}_text_document")
        write_manifest(manifest, parts, lengths, run / "data" / f"{name}.manifest.parquet")
        documents[name], token_counts[name] = n, int(lengths.sum())
    shutil.copy2(base / "tokenizer.json", run / "tokenizer.json")
    last = spec.spike_iteration + spec.log_tail
    for it in range(spec.checkpoint_interval, last + 1, spec.checkpoint_interval):
        (run / "checkpoints" / f"iter_{it:07d}").mkdir(parents=True, exist_ok=True)
    (run / "logs").mkdir(exist_ok=True)
    (run / "logs" / "train.log").write_text("\n".join(megatron_log_lines(spec)) + "\n")
    (run / "forensics.yaml").write_text(yaml.safe_dump(config_dict(spec), sort_keys=False))
    truth.update(spec=asdict(spec), documents=documents, tokens=token_counts,
                 switch_iteration=spec.switch_iteration, spike_iteration=spec.spike_iteration,
                 dirty_doc_ids=None, distinct_from=str(base))  # fmt: skip
    (run / "truth.json").write_text(json.dumps(truth, indent=2))
    print(
        f"built the distinct-document run in {time.perf_counter() - t0:.0f} s: "
        f"{sum(documents.values()):,} documents, {sum(token_counts.values()):,} tokens"
    )
    return truth


def census_only(config: Path, out: Path, opts: Any) -> dict[str, float]:
    """The first pass alone (`--census-only`): open the run, replay window and baseline in
    parts into the replay cache file (forensics.spike.census, on `opts`' engine), and find each
    side's distinct documents by polars' streaming engine over that file (sides-<key>.parquet).
    Nothing is decoded. Returns the stage timings."""
    with open_run(config, out, opts) as run:
        path = run.cache / f"replay-{run.key}.parquet"
        sides = {"window": run.plan.window, "baseline": run.plan.baseline}
        with run.clock.stage("replay", "census in parts"):
            census_file(run.replayer, run.config, sides, path, engine=opts.engine,
                        workers=opts.workers, address=opts.ray_address)  # fmt: skip
            run.replayer.save_cache()
        with run.clock.stage("distinct", "each side's documents, streamed"):
            columns = ("side", "dataset", "doc_id")
            drawn = pl.scan_parquet(path).select(columns).unique().sort(columns)
            drawn.sink_parquet(run.cache / f"sides-{run.key}.parquet")
        return dict(run.clock.timings)
