"""One shard of a scan: iterations first..last replayed, decoded, scored, summarised to Parquet.

This is the unit both engines run (a process-pool task or a Ray Data map task). It opens the
replayer itself from the run config and reads the `.bin/.idx` files itself, so no document text
passes through the driver; what comes back is a few numbers (`ShardSummary`). Its files:

    parts/<first>-<last>.iters.parquet    one row per iteration (ITER_COLUMNS)
    parts/<first>-<last>.docs.parquet     one row per flagged document drawn in the shard
    parts/<first>-<last>.sources.parquet  per (facet, key): segments drawn and flagged
    parts/<first>-<last>.instances.parquet  flagged training instances (iteration, position,
                                          sample_index, the repetition's times, period, span)
    parts/<first>-<last>.done.json        written last: the shard is complete (its summary)

Every file is written atomically and the done marker last, so a shard killed half-way leaves no
marker and is redone by the next run; a shard whose marker exists is never redone.

Kinds of flag, per document (thresholds of forensics.score and forensics.score.repeats):

    garbage   garbage_score >= 0.5 (encoding garbage)
    spam      spam_score >= 0.5 (template spam; the skeleton signal compares the shard's
              documents with each other, so it depends on the shard layout, which is fixed by
              the config and --shard-iterations)
    ngram     the whole document holds a 1-13-token n-gram repeated >= 32 times in a row

and per training instance (the Megatron sample, all its seq_length + 1 tokens, the way OLMo-core
checks an instance): `instance_ngram`, the same rule inside the sample. A sample is flagged
when any of its documents is flagged or the instance rule fires.
"""

from __future__ import annotations

import json
import os
import time
import weakref
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dataloaders.atomic import write_json_atomic, write_parquet_atomic
from dataloaders.storage import fetched
from forensics.errors import ForensicsError
from forensics.replay import open_replayer
from forensics.scan.memory import AnonPeak
from forensics.score import FLAG_THRESHOLD, score_table
from forensics.score.repeats import MAX_COUNT, Repeats, find_repeats

KINDS = ("garbage", "spam", "ngram", "instance_ngram")
WORST_PER_ITERATION = 3
INSTANCE_CHUNK = 2048  # samples whose tokens are gathered at once for the instance rule
SOURCE_FACETS = ("dataset", "source", "crawl_batch", "domain", "file")  # as cluster/source.py
FAULT_ENV = "FORENSICS_SCAN_FAULT"  # tests: "<first iteration>:<marker file>" kills that worker

ITER_SCHEMA = {
    "iteration": pl.Int64,
    "samples": pl.Int64,
    "flagged_samples": pl.Int64,
    **{f"{k}_samples": pl.Int64 for k in KINDS},
    "tokens": pl.Int64,
    "documents": pl.Int64,
}


@dataclass(frozen=True)
class ShardSummary:
    """What a shard reports back to the driver (no text)."""

    first: int
    last: int
    samples: int
    documents: int  # distinct documents decoded and scored
    tokens: int  # tokens the shard's samples hold (what training reads)
    document_tokens: int  # tokens of the whole documents decoded
    flagged_samples: int
    seconds: float
    cpu_seconds: float  # CPU time of the worker process in the shard (all its threads)
    pid: int
    peak_rss_mb: float  # peak private (anonymous) memory, MB; mapped .bin pages not counted
    fetched_bytes: int = 0  # bytes the shard read from object storage (a run whose data is remote)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def part_name(first: int, last: int) -> str:
    return f"{first:09d}-{last:09d}"


def done_path(parts: Path, first: int, last: int) -> Path:
    return parts / f"{part_name(first, last)}.done.json"


def read_done(parts: Path, first: int, last: int) -> ShardSummary | None:
    """The summary of a completed shard, or None (absent or unreadable: redo it)."""
    path = done_path(parts, first, last)
    if not path.is_file():
        return None
    try:
        return ShardSummary(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


_REPLAYERS: dict[str, Any] = {}  # one replayer per run config per worker process


def _replayer(config: Any) -> Any:
    key = config.config_hash()
    if key not in _REPLAYERS:
        _REPLAYERS[key] = open_replayer(config)
    return _REPLAYERS[key]


# replayer -> dataset name -> start token of every document (the .bin offset of each document's
# first sequence, in tokens), built once per replayer of this worker process
_DOC_STARTS: weakref.WeakKeyDictionary[Any, dict[str, np.ndarray]] = weakref.WeakKeyDictionary()


def _token_view(replayer: Any, name: str) -> tuple[np.ndarray, np.ndarray, Any]:
    """(token memmap, start token of every document, dataset) of a Megatron dataset."""
    ds = replayer.datasets[replayer.specs[name].prefix]
    cache = _DOC_STARTS.setdefault(replayer, {})
    if name not in cache:
        first_seq = np.asarray(ds.document_indices[:-1], dtype=np.int64)
        cache[name] = (
            np.asarray(ds.sequence_pointers, dtype=np.int64)[
                np.minimum(first_seq, max(ds.sequence_count - 1, 0))
            ]
            // ds.dtype.itemsize
        )
    return ds.tokens, cache[name], ds


def document_tokens(replayer: Any, docs: pl.DataFrame) -> list[np.ndarray]:
    """Token arrays of whole documents (dataset, doc_id), as views of the .bin memmap."""
    out: list[np.ndarray] = []
    counts: dict[str, np.ndarray] = {}
    for name, doc in docs.select("dataset", "doc_id").iter_rows():
        tokens, starts, ds = _token_view(replayer, name)
        if name not in counts:
            counts[name] = np.asarray(ds.document_token_counts(), dtype=np.int64)
        begin = int(starts[doc])
        out.append(tokens[begin : begin + int(counts[name][doc])])
    return out


def instance_repeats(replayer: Any, table: pl.DataFrame, n_samples: int) -> Repeats:
    """The strongest repetition inside each sample (replay order; int64 [n_samples] each).

    A sample's tokens are its segments' token ranges, concatenated in order; gathered
    INSTANCE_CHUNK samples at a time so memory stays bounded whatever the shard size."""
    seg = table.select("dataset", "doc_id", "token_start", "token_end", "_sample")
    sample = seg["_sample"].to_numpy()
    bounds = np.searchsorted(sample, np.arange(0, n_samples + INSTANCE_CHUNK, INSTANCE_CHUNK))
    names = seg["dataset"].to_list()
    docs = seg["doc_id"].to_numpy()
    lo_tok = seg["token_start"].to_numpy()
    hi_tok = seg["token_end"].to_numpy()
    best = [np.zeros(n_samples, dtype=np.int64) for _ in range(4)]
    for c in range(len(bounds) - 1):
        a, b = int(bounds[c]), int(bounds[c + 1])
        if a == b:
            continue
        pieces: list[list[np.ndarray]] = []
        current = -1
        for i in range(a, b):
            tokens, starts, _ = _token_view(replayer, names[i])
            begin = int(starts[docs[i]])
            piece = tokens[begin + int(lo_tok[i]) : begin + int(hi_tok[i])]
            if sample[i] != current:
                pieces.append([])
                current = sample[i]
            pieces[-1].append(piece)
        rows = [np.concatenate(p) if len(p) > 1 else p[0] for p in pieces]
        ids = np.unique(sample[a:b])
        found = find_repeats(rows)
        for dst, src in zip(best, (found.times, found.period, found.start, found.end), strict=True):
            dst[ids] = src
    return Repeats(*best)


def _maybe_fail(first: int) -> None:
    """Fault injection for the tests: the first attempt at shard `first` kills its worker."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    at, _, marker = spec.partition(":")
    if at.isdigit() and int(at) == first and marker and not Path(marker).exists():
        Path(marker).write_text(str(os.getpid()))
        os._exit(17)


def _reason(row: dict[str, Any]) -> str:
    parts = []
    if row["garbage_score"] >= FLAG_THRESHOLD and row["garbage_reason"]:
        parts.append(row["garbage_reason"])
    if row["spam_score"] >= FLAG_THRESHOLD and row["spam_reason"]:
        parts.append(row["spam_reason"])
    if row["ngram_times"] >= MAX_COUNT:
        parts.append(
            f"a {row['ngram_period']}-token n-gram repeated {row['ngram_times']} times in a row"
        )
    return "; ".join(parts)


def scan_shard(
    config: Any, first: int, last: int, parts: str | Path, *, score_threads: int = 1
) -> ShardSummary:
    """Scan iterations first..last and write the shard's parts (see module doc); a shard with a
    done marker is not redone (its recorded summary is returned)."""
    parts = Path(parts)
    done = read_done(parts, first, last)
    if done is not None:
        return done
    _maybe_fail(first)

    cpu0, fetched0 = time.process_time(), fetched.total()
    with AnonPeak() as peak:
        summary = _scan(config, first, last, parts, score_threads)
    summary = replace(
        summary,
        peak_rss_mb=round(peak.mb, 1),
        cpu_seconds=time.process_time() - cpu0,
        fetched_bytes=fetched.total() - fetched0,
    )
    write_json_atomic(done_path(parts, first, last), summary.to_dict())
    return summary


def _scan(config: Any, first: int, last: int, parts: Path, score_threads: int) -> ShardSummary:
    t0 = time.perf_counter()
    rep = _replayer(config)
    if not rep.token_files:
        raise ForensicsError("forensics scan reads Megatron .bin/.idx runs (data.format: megatron)")
    table = _replay_samples(rep, first, last)
    n_samples = int(table["_sample"].max()) + 1
    flags, facets, doc_tokens = _document_flags(rep, table, score_threads)

    # Samples: flagged by any of their documents, or by the instance rule.
    inst = instance_repeats(rep, table, n_samples)
    segs = table.select("iteration", "_sample", "dataset", "doc_id", *facets).join(
        flags.select("dataset", "doc_id", "garbage", "spam", "ngram", "severity"),
        on=["dataset", "doc_id"],
        how="left",
    )
    iters = _iteration_table(table, segs, inst)
    flagged_docs = _flagged_documents(table, segs, flags, facets)
    sources = _source_table(segs)
    instances = _instance_table(table, inst)

    name = part_name(first, last)
    write_parquet_atomic(instances, parts / f"{name}.instances.parquet")
    write_parquet_atomic(iters, parts / f"{name}.iters.parquet")
    write_parquet_atomic(flagged_docs, parts / f"{name}.docs.parquet")
    write_parquet_atomic(sources, parts / f"{name}.sources.parquet")
    summary = ShardSummary(
        first=first,
        last=last,
        samples=n_samples,
        documents=flags.height,
        tokens=int(iters["tokens"].sum()),
        document_tokens=doc_tokens,
        flagged_samples=int(iters["flagged_samples"].sum()),
        seconds=time.perf_counter() - t0,
        cpu_seconds=0.0,  # set by scan_shard
        pid=os.getpid(),
        peak_rss_mb=0.0,  # set by scan_shard: the process's peak private memory in the shard
    )
    return summary


def _replay_samples(rep: Any, first: int, last: int) -> pl.DataFrame:
    """The shard's replay table with `_sample`: the shard-local sample number (0-based, one per
    (iteration, position), in replay order) of each segment row."""
    table = rep.replay(first, last, text=False, progress=False)
    return table.with_columns(
        _sample=(
            (pl.col("iteration") != pl.col("iteration").shift(1))
            | (pl.col("position") != pl.col("position").shift(1))
        )
        .fill_null(True)
        .cum_sum()
        .cast(pl.Int64)
        - 1
    )


def _document_flags(
    rep: Any, table: pl.DataFrame, score_threads: int
) -> tuple[pl.DataFrame, list[str], int]:
    """Each distinct document decoded whole, scored once and checked for repeats: (one row per
    document with its scores, ngram_* and the kind flags garbage/spam/ngram and severity; the
    facet columns; the tokens of the whole documents decoded)."""
    distinct = table.select("dataset", "doc_id").unique().sort("dataset", "doc_id")
    docs = rep.documents(distinct, progress=False)
    scored = score_table(docs.select("dataset", "doc_id", "text"), "text", workers=score_threads)
    doc_tok = document_tokens(rep, distinct)
    rep_doc = find_repeats(doc_tok)
    doc_tokens = int(sum(len(t) for t in doc_tok))
    facets = [c for c in docs.columns if c not in ("dataset", "doc_id", "text")]
    flags = scored.drop("text").with_columns(
        ngram_times=pl.Series(rep_doc.times, dtype=pl.Int64),
        ngram_period=pl.Series(rep_doc.period, dtype=pl.Int64),
        ngram_start=pl.Series(rep_doc.start, dtype=pl.Int64),
    )
    flags = flags.with_columns(
        garbage=pl.col("garbage_score") >= FLAG_THRESHOLD,
        spam=pl.col("spam_score") >= FLAG_THRESHOLD,
        ngram=pl.col("ngram_times") >= MAX_COUNT,
        severity=pl.max_horizontal(
            "garbage_score",
            "spam_score",
            (pl.col("ngram_times") / MAX_COUNT).clip(0.0, 1.0),
        ),
    )
    return flags, facets, doc_tokens


def _iteration_table(table: pl.DataFrame, segs: pl.DataFrame, inst: Repeats) -> pl.DataFrame:
    """One row per iteration (ITER_SCHEMA) and its worst documents."""
    tokens_per_iter = table.group_by("iteration").agg(
        (pl.col("token_end") - pl.col("token_start")).sum().alias("tokens")
    )
    per_sample = (
        segs.group_by("_sample")
        .agg(
            pl.col("iteration").first(),
            pl.col("garbage").any(),
            pl.col("spam").any(),
            pl.col("ngram").any(),
        )
        .sort("_sample")
        .with_columns(instance_ngram=pl.Series(inst.flagged()))
        .with_columns(flagged=pl.any_horizontal(*KINDS))
    )
    docs_per_iter = (
        segs.select("iteration", "dataset", "doc_id")
        .unique()
        .group_by("iteration")
        .agg(pl.len().cast(pl.Int64).alias("documents"))
    )
    iters = (
        per_sample.group_by("iteration")
        .agg(
            pl.len().cast(pl.Int64).alias("samples"),
            pl.col("flagged").sum().cast(pl.Int64).alias("flagged_samples"),
            *[pl.col(k).sum().cast(pl.Int64).alias(f"{k}_samples") for k in KINDS],
        )
        .join(tokens_per_iter, on="iteration")
        .join(docs_per_iter, on="iteration")
        .with_columns(pl.col("tokens").cast(pl.Int64))
        .sort("iteration")
        .select(list(ITER_SCHEMA))
    )
    worst = (
        segs.filter(pl.col("garbage") | pl.col("spam") | pl.col("ngram"))
        .select("iteration", "dataset", "doc_id", "severity")
        .unique()
        .sort(
            ["iteration", "severity", "dataset", "doc_id"], descending=[False, True, False, False]
        )
        .group_by("iteration", maintain_order=True)
        .head(WORST_PER_ITERATION)
        .group_by("iteration", maintain_order=True)
        .agg(pl.struct("dataset", "doc_id", "severity").alias("worst_documents"))
    )
    return iters.join(worst, on="iteration", how="left").sort("iteration")


def _flagged_documents(
    table: pl.DataFrame, segs: pl.DataFrame, flags: pl.DataFrame, facets: list[str]
) -> pl.DataFrame:
    """Flagged documents, with where they were drawn (the block list is built from these)."""
    drawn = segs.group_by("dataset", "doc_id").agg(
        pl.col("iteration").min().alias("first_iteration"),
        pl.col("_sample").n_unique().cast(pl.Int64).alias("samples"),
    )
    flagged_docs = (
        flags.filter(pl.col("garbage") | pl.col("spam") | pl.col("ngram"))
        .join(drawn, on=["dataset", "doc_id"])
        .join(
            table.select("dataset", "doc_id", *facets).unique(["dataset", "doc_id"]),
            on=["dataset", "doc_id"],
            how="left",
        )
    )
    return flagged_docs.with_columns(
        reason=pl.Series([_reason(r) for r in flagged_docs.iter_rows(named=True)], dtype=pl.Utf8),
        kinds=pl.concat_str(
            [pl.when(pl.col(k)).then(pl.lit(k)) for k in ("garbage", "spam", "ngram")],
            separator=",",
            ignore_nulls=True,
        ),
    ).select(
        "dataset",
        "doc_id",
        *facets,
        "kinds",
        "severity",
        "garbage_score",
        "spam_score",
        "ngram_times",
        "ngram_period",
        "reason",
        "first_iteration",
        "samples",
    )


def _source_table(segs: pl.DataFrame) -> pl.DataFrame:
    """Segments drawn and flagged per facet value (the report's top offenders)."""
    source_parts = []
    seg_flag = segs.with_columns(
        _flag=(pl.col("garbage") | pl.col("spam") | pl.col("ngram")).fill_null(False)
    )
    for facet in [f for f in SOURCE_FACETS if f in seg_flag.columns]:
        source_parts.append(
            seg_flag.group_by(pl.col(facet).fill_null("(none)").alias("key"))
            .agg(
                pl.len().cast(pl.Int64).alias("segments"),
                pl.col("_flag").sum().cast(pl.Int64).alias("flagged_segments"),
            )
            .with_columns(facet=pl.lit(facet))
            .select("facet", "key", "segments", "flagged_segments")
        )
    return pl.concat(source_parts)


def _instance_table(table: pl.DataFrame, inst: Repeats) -> pl.DataFrame:
    """Flagged training instances (OLMo-core would drop them): where, and the repetition."""
    keys = table.group_by("_sample").agg(
        pl.col("iteration").first(), pl.col("position").first(), pl.col("sample_index").first()
    )
    hit = np.flatnonzero(inst.flagged())
    return (
        pl.DataFrame(
            {
                "_sample": pl.Series(hit, dtype=pl.Int64),
                "ngram_times": pl.Series(inst.times[hit], dtype=pl.Int64),
                "ngram_period": pl.Series(inst.period[hit], dtype=pl.Int64),
                "ngram_start": pl.Series(inst.start[hit], dtype=pl.Int64),
                "ngram_end": pl.Series(inst.end[hit], dtype=pl.Int64),
            }
        )
        .join(keys, on="_sample")
        .sort("_sample")
        .select(
            "iteration",
            "position",
            "sample_index",
            "ngram_times",
            "ngram_period",
            "ngram_start",
            "ngram_end",
        )
    )
