"""Merge a scan's shard parts into its outputs: scan.parquet, the block list, skip.json, report.

Only per-iteration rows, flagged documents and per-source counts are read back (never text), so
merging a 10,000-iteration scan is a few small tables. The skip list is made with the public
functions of forensics.skip, the way `forensics spike` makes its own, so `forensics check-skip`
reads it the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from dataloaders.atomic import atomic_path, write_json_atomic, write_parquet_atomic
from forensics.scan.report import write_report
from forensics.scan.shard import KINDS, part_name
from forensics.skip import merge_ranges, select_iterations
from forensics.skip.plan import build_skip_plan, choose_flags

TOP_SOURCES = 10
DOC_KINDS = ("garbage", "spam", "ngram")


def read_parts(parts: Path, shards: list[tuple[int, int]], kind: str) -> list[Path]:
    return [parts / f"{part_name(a, b)}.{kind}.parquet" for a, b in shards]


def sink_instances(files: list[Path], path: Path) -> None:
    """The shards' flagged instances in training order, into `path` (atomically) by polars'
    streaming engine: a scan flagging most samples of a long range never holds them whole."""
    with atomic_path(path) as tmp:
        scans = pl.concat([pl.scan_parquet(f) for f in files])
        scans.sort("iteration", "position").sink_parquet(tmp)


def iteration_table(parts: Path, shards: list[tuple[int, int]]) -> pl.DataFrame:
    """scan.parquet's rows: the shards' iteration rows plus the flagged share per kind."""
    table = pl.concat([pl.read_parquet(p) for p in read_parts(parts, shards, "iters")]).sort(
        "iteration"
    )
    shares = [
        (pl.col("flagged_samples") / pl.col("samples")).alias("flagged_share"),
        *[(pl.col(f"{k}_samples") / pl.col("samples")).alias(f"{k}_share") for k in KINDS],
    ]
    return table.with_columns(shares)


def flagged_documents(parts: Path, shards: list[tuple[int, int]]) -> pl.DataFrame:
    """Every flagged document drawn in the scan, once (a document drawn by several shards:
    its kinds united, its earliest iteration, its samples summed)."""
    files = read_parts(parts, shards, "docs")
    frame = pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed")
    if frame.height == 0:
        return frame
    facets = [
        c
        for c in frame.columns
        if c
        not in (
            "dataset",
            "doc_id",
            "kinds",
            "severity",
            "reason",
            "first_iteration",
            "samples",
            "garbage_score",
            "spam_score",
            "ngram_times",
            "ngram_period",
        )
    ]
    return (
        frame.group_by("dataset", "doc_id")
        .agg(
            *[pl.col(f).first() for f in facets],
            *[pl.col("kinds").str.contains(k).any().alias(f"_{k}") for k in DOC_KINDS],
            pl.col("severity").max(),
            pl.col("garbage_score").max(),
            pl.col("spam_score").max(),
            pl.col("ngram_times").max(),
            pl.col("ngram_period").first(),
            pl.col("reason").first(),
            pl.col("first_iteration").min(),
            pl.col("samples").sum(),
        )
        .with_columns(
            kinds=pl.concat_str(
                [pl.when(pl.col(f"_{k}")).then(pl.lit(k)) for k in DOC_KINDS],
                separator=",",
                ignore_nulls=True,
            )
        )
        .drop([f"_{k}" for k in DOC_KINDS])
        .sort("dataset", "doc_id")
    )


def top_sources(parts: Path, shards: list[tuple[int, int]], top: int = TOP_SOURCES) -> pl.DataFrame:
    """Facet values ranked by the flagged document segments they put in the scanned batches."""
    frame = pl.concat([pl.read_parquet(p) for p in read_parts(parts, shards, "sources")])
    return (
        frame.group_by("facet", "key")
        .agg(pl.col("segments").sum(), pl.col("flagged_segments").sum())
        .with_columns((pl.col("flagged_segments") / pl.col("segments")).alias("flagged_share"))
        .filter(pl.col("flagged_segments") > 0)
        .sort(
            ["flagged_segments", "flagged_share", "facet", "key"],
            descending=[True, True, False, False],
        )
        .head(top)
    )


def by_dataset(docs: pl.DataFrame) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for (name,), part in docs.group_by(["dataset"], maintain_order=True):
        out[str(name)] = sorted(int(d) for d in part["doc_id"])
    return dict(sorted(out.items()))


def stretches(scan: pl.DataFrame, ranges: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """Each skipped stretch with its flagged share overall and per kind."""
    out = []
    for a, b in ranges:
        part = scan.filter(pl.col("iteration").is_between(a, b))
        samples = int(part["samples"].sum())
        out.append(
            {
                "first": a,
                "last": b,
                "iterations": b - a + 1,
                "flagged_share": round(int(part["flagged_samples"].sum()) / samples, 4),
                "kinds": {
                    k: round(int(part[f"{k}_samples"].sum()) / samples, 4)
                    for k in KINDS
                    if int(part[f"{k}_samples"].sum())
                },
            }
        )
    return out


def skip_plan(
    run: Any,
    replayer: Any,
    scan: pl.DataFrame,
    docs: pl.DataFrame,
    opts: Any,
    fingerprint: dict[str, Any],
    notes: list[str],
) -> dict[str, Any]:
    """skip.json for the dense stretches: a forensics.skip.plan.SkipPlan (spike's format, read
    back by check-skip), plus `kind: scan` and the `stretches` with their share per kind.

    A scan has no spike: `step` and `window` are the scanned range's last iteration and the
    range; the restart it plans is from the latest checkpoint before the range (else from the
    iteration before it, noted), which is where the flags are proven from."""
    exposure = scan.select("iteration", "samples", "flagged_samples")
    chosen = select_iterations(exposure, opts.threshold)
    trainer = run.training.registered_trainer
    before = [c for c in run.available_checkpoints(trainer) if c < opts.first]
    checkpoint = before[-1] if before else opts.first - 1
    if not before:
        notes.append(
            f"no checkpoint before iteration {opts.first} is known; the flags assume a restart "
            f"from iteration {checkpoint}"
        )
    choice = choose_flags(trainer, chosen, replayer, checkpoint)
    if not choice.exact:
        refusal = choice.flags[trainer.name].refusal
        notes.append(
            f"{trainer.name}: {trainer.no_skip}"
            if trainer.no_skip
            else f"no exact {trainer.name} skip flag for these stretches ({refusal}); "
            "remove the block list's documents instead"
        )
    if choice.composed:
        notes.append(
            f"{len(choice.composed)} iterations were skipped by an earlier restart "
            "(training.applied_skips) and are skipped again"
        )
    blocklist = by_dataset(docs)
    plan = build_skip_plan(
        choice,
        replayer,
        exposure,
        step=opts.last,
        window=[opts.first, opts.last],
        rollback={
            "iteration": checkpoint,
            "checkpoint": bool(before),
            "rule": "scan",
            "note": "the latest checkpoint before the scanned range",
            "resume_iteration": checkpoint + 1,
        },
        scope=[opts.first, opts.last],
        threshold=opts.threshold,
        documents=blocklist,
        culprit_clusters=[],
        documents_seen_in_window=docs.height,
        documents_flagged=blocklist,
        ahead={},
        fingerprint=fingerprint,
        notes=notes,
    )
    # The stretches as found (plan.iterations may be widened for the trainer's syntax).
    return {"kind": "scan", **plan.to_dict(), "stretches": stretches(scan, merge_ranges(chosen))}


def write_outputs(
    run: Any,
    replayer: Any,
    out: Path,
    parts: Path,
    shards: list[tuple[int, int]],
    opts: Any,
    fingerprint: dict[str, Any],
    notes: list[str],
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Write every output of the scan; returns (scan table, skip dict)."""
    scan = iteration_table(parts, shards)
    docs = flagged_documents(parts, shards)
    sources = top_sources(parts, shards)
    skip = skip_plan(run, replayer, scan, docs, opts, fingerprint, notes)
    block = {
        "version": 1,
        "scope": [opts.first, opts.last],
        "documents": skip["documents"],
        "count": docs.height,
        "by_kind": {
            k: int(docs["kinds"].str.contains(k).sum()) if docs.height else 0 for k in DOC_KINDS
        },
        "fingerprint": fingerprint,
    }
    sink_instances(read_parts(parts, shards, "instances"), out / "instances.parquet")
    write_parquet_atomic(scan, out / "scan.parquet")
    write_parquet_atomic(docs, out / "blocklist.parquet")
    write_json_atomic(out / "blocklist.json", block)
    write_report(out, scan, skip, docs, sources, opts.threshold)
    write_json_atomic(out / "skip.json", skip, overwrite=True)
    return scan, skip
