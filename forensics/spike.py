"""`forensics spike`: replay -> score -> cluster -> report, then rollback and skip list.

One function of a config and a few numbers (`run_spike`). Each stage's output is cached under
`<out>/.cache/`, named by a hash of everything it depends on, so a rerun with another threshold,
`--after` or `--skip-ahead` redoes only the cheap end (clusters, skip ranges, report): the
replay, the decoded documents, their scores, the embeddings and the forward-exposure scan are
read back.

    stage        cache file                  key
    replay       replay-<k>.parquet          config hash, data fingerprint, window, baseline
    documents    docs-<k>.parquet            same
    scores       scores-<k>.parquet          same + scorer module version
    embeddings   embeddings/                 content hash of each text (cluster.embedding)
    exposure     exposure-<k2>.parquet       config hash, culprit documents, iteration range

The output directory carries a marker (`.cache/run.json`: config hash, step). A directory that
holds another run (other config or step), or files that are not a spike run, is refused unless
`--force`; nothing of the user's is ever deleted. An existing `skip.json` is never overwritten
without `--force`, and that is checked before any work is done.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from dataloaders.schedule import Schedule
from dataloaders.trainer_loops import check_trainer
from forensics.atomic import write_json_atomic, write_parquet_atomic, write_text_atomic
from forensics.config import RunConfig, load_config
from forensics.errors import ForensicsError
from forensics.outputs import hold_lock, publish
from forensics.rollback import Rollback, recommend_rollback
from forensics.skip import (
    check_threshold,
    collateral,
    sample_ranges,
    select_iterations,
)
from forensics.skip.plan import SkipPlan, plan_flags
from forensics.skip.tracker import TRACKER_FILE, how_to_pass, tracker_text

TRACKED_TRAINERS = ("megatron-lm", "megatron-lm-pre-0.17")  # read a tracker file of skips
MARKER = "run.json"
# What a spike run publishes into --out (an earlier run's extra files are removed on --force).
OUTPUT_PATTERNS = ("report.json", "report.md", "report.html", "report_*.png", "skip.json",
                   "megatron_args.txt", "iterations_to_skip.tracker",
                   "restart-*.flags")  # fmt: skip
SKIP_FILE = "skip.json"
ARGS_FILE = "megatron_args.txt"
BASELINE_WINDOWS_BACK = 10  # default baseline: the same length, ending 10 windows earlier
AHEAD_TOP = 10  # densest iterations ahead listed in the report


@dataclass(frozen=True)
class SpikeOptions:
    """Everything `forensics spike` takes besides the config and the output directory."""

    step: int
    window: int = 300
    baseline: str | None = None  # "FIRST-LAST", or "stage" (start of the window's data stage)
    baseline_offset: int | None = None  # baseline ends this many iterations before the window
    after: int = 0  # also skip this many iterations past the spike
    threshold: float = 0.0  # skip an iteration when its culprit share exceeds this (0: any)
    skip_ahead: bool = False  # add the densest iterations ahead to the skip ranges
    ahead_share: float = 0.25  # "dense" ahead: at least this share of the batch is culprit
    culprits: tuple[str, ...] | None = None  # cluster ids to blame instead of the verdicts
    embed_cap: int | None = None  # documents embedded (None: the embedder's default; 0: skip)
    # "static" (model2vec distilled from MiniLM; the CPU default), "minilm", or a local
    # model2vec / sentence-transformers directory (None: static on a CPU, MiniLM on a GPU)
    embed_model: str | None = None
    device: str = "cpu"  # torch device for the embeddings ("cuda" on a GPU machine)
    trainer: str | None = None  # the loop that reads the skip flags (None: training.trainer)
    rescore: Any = None  # forensics.rescore.RescoreOptions: the model's view (None: data only)
    force: bool = False
    progress: bool = True


@dataclass
class SpikeResult:
    """What a run produced: paths, the skip plan as written, the report, stage timings."""

    out: Path
    skip: SkipPlan
    report: Any
    rollback: Rollback
    window: tuple[int, int]
    baseline: tuple[int, int]
    timings: dict[str, float] = field(default_factory=dict)
    cached: dict[str, bool] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


# -- windows ------------------------------------------------------------------------------------


def stage_starts(config: RunConfig) -> list[int]:
    """First iteration of each data stage (Megatron and OLMo-core configs; [1] otherwise)."""
    starts = getattr(config.data, "stage_start_iterations", None)
    if starts:
        return list(starts)
    stages = getattr(config.data, "data_stages", None)
    return [s.start_iteration for s in stages] if stages else [1]


def parse_range(text: str, what: str) -> tuple[int, int]:
    """ "FIRST-LAST" -> (first, last), 1-indexed inclusive."""
    parts = text.split("-")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise ForensicsError(f"{what} {text!r}: expected FIRST-LAST, e.g. 1000-1299")
    first, last = int(parts[0]), int(parts[1])
    if not 1 <= first <= last:
        raise ForensicsError(f"{what} {text!r}: need 1 <= FIRST <= LAST")
    return first, last


def plan_baseline(
    window: tuple[int, int], starts: list[int], baseline: str | None, offset: int | None
) -> tuple[tuple[int, int], str]:
    """The baseline window and a sentence saying how it was chosen.

    Default: as many iterations as the window, ending BASELINE_WINDOWS_BACK windows before it,
    clamped at iteration 1 (and never overlapping the window). "stage": the first iterations of
    the data stage the spike is in. "FIRST-LAST": as given.
    """
    first, last = window
    length = last - first + 1
    if baseline is not None and baseline != "stage":
        b = parse_range(baseline, "--baseline")
        if b[1] >= first and b[0] <= last:
            raise ForensicsError(f"--baseline {baseline} overlaps the window {first}-{last}")
        return b, "as given (--baseline)"
    if first <= 1:
        raise ForensicsError(
            f"the window {first}-{last} starts at iteration 1: there is nothing before it to "
            "compare with; pass --baseline FIRST-LAST after the window"
        )
    if baseline == "stage":
        start = max(s for s in starts if s <= last)
        end = min(start + length - 1, first - 1)
        if end < start:
            raise ForensicsError(
                f"--baseline stage: the data stage starts at {start}, inside the window "
                f"{first}-{last}; there is no baseline in it before the window"
            )
        return (start, end), f"the start of the spike's data stage (iteration {start})"
    back = offset if offset is not None else BASELINE_WINDOWS_BACK * length
    if back < 0:
        raise ForensicsError(f"--baseline-offset {back}: must be >= 0")
    end = first - 1 - back
    if end < 1:
        end = min(length, first - 1)
        return (1, end), f"clamped at iteration 1 (the run is too short for {back} back)"
    return (max(1, end - length + 1), end), f"ending {back} iterations before the window"


def crossings(window: tuple[int, int], starts: list[int]) -> list[int]:
    """Data stage starts inside the window (after its first iteration)."""
    return [s for s in starts if window[0] < s <= window[1]]


# -- caching ------------------------------------------------------------------------------------


def cache_key(**parts: Any) -> str:
    """A short stable hash of a stage's inputs."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def cached_table(
    path: Path, compute: Callable[[], pl.DataFrame], hits: dict[str, bool], name: str
) -> pl.DataFrame:
    """Read `path` if a previous run wrote it, else compute and write it atomically."""
    if path.is_file():
        try:
            table = pl.read_parquet(path)
            hits[name] = True
            return table
        except Exception:  # a damaged cache file is recomputed, never trusted
            pass
    table = compute()
    write_parquet_atomic(table, path)
    hits[name] = False
    return table


def check_output_dir(out: Path, config_hash: str, step: int, force: bool) -> None:
    """Refuse a directory holding another run or foreign files (unless force), and an existing
    skip.json (unless force). Called before any work, so a refusal costs nothing."""
    if out.exists() and not out.is_dir():
        raise ForensicsError(f"{out}: exists and is not a directory")
    if not out.is_dir() or force:
        return
    marker = out / ".cache" / MARKER
    if marker.is_file():
        try:
            prior = json.loads(marker.read_text())
        except (OSError, json.JSONDecodeError):
            prior = {}
        if prior.get("config_hash") != config_hash or prior.get("step") != step:
            raise ForensicsError(
                f"{out}: holds an older run (step {prior.get('step')}, config "
                f"{prior.get('config_hash')}), not step {step} of config {config_hash}; choose "
                "another --out, or pass --force to write over its reports (other files are kept)"
            )
    elif any(p.name != ".cache" for p in out.iterdir()):  # .cache alone: an interrupted start
        raise ForensicsError(
            f"{out}: exists and holds files that are not a forensics spike run; choose another "
            "--out, or pass --force to write into it (nothing is deleted)"
        )
    if (out / SKIP_FILE).exists():
        raise ForensicsError(
            f"{out / SKIP_FILE}: already exists; pass --force to overwrite it (the replay, "
            "scores and embeddings are cached, so the rerun is fast)"
        )


class Stages:
    """Per-stage wall times, with a rich status line while each runs."""

    def __init__(self, progress: bool) -> None:
        self.timings: dict[str, float] = {}
        self.progress = progress
        self._console: Any = None

    @contextmanager
    def stage(self, name: str, what: str, *, spinner: bool = False) -> Iterator[None]:
        """Time a stage. Stages whose work shows its own progress bar (replay, decode, score,
        embed) get none here: rich cannot nest live displays. The others get a spinner."""
        t0 = time.perf_counter()
        if self.progress:
            from rich.markup import escape

            from forensics.report.terminal import make_console

            self._console = self._console or make_console(stderr=True)
            if spinner:
                with self._console.status(f"[bold]{name}[/]: {escape(what)}"):
                    yield
            else:
                yield
            self._console.print(
                f"[dim]{name:<10}[/] {escape(what)} [dim]({time.perf_counter() - t0:.1f} s)[/]"
            )
        else:
            yield
        self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - t0


# -- culprit exposure and the skip list ---------------------------------------------------------


def onset_iteration(replay: pl.DataFrame, culprit: pl.DataFrame) -> int | None:
    """First iteration of the replay table holding any culprit document."""
    hit = replay.join(culprit.select("dataset", "doc_id").unique(), on=["dataset", "doc_id"])
    return int(hit["iteration"].min()) if hit.height else None


def ahead_summary(ahead: pl.DataFrame, dense_share: float, top: int = AHEAD_TOP) -> dict[str, Any]:
    """Forward exposure: the culprit's share of the rest of the run and its densest iterations."""
    if ahead.height == 0:
        return {"iterations": 0, "share_of_remaining_samples": 0.0}
    shares = ahead.with_columns(
        (pl.col("flagged_samples") / pl.col("samples")).alias("share")
    ).filter(pl.col("samples") > 0)
    total = int(shares["samples"].sum())
    flagged = int(shares["flagged_samples"].sum())
    dense = shares.filter(pl.col("share") >= dense_share)
    densest = shares.sort(["share", "iteration"], descending=[True, False]).head(top)
    return {
        "from_iteration": int(ahead["iteration"].min()),
        "to_iteration": int(ahead["iteration"].max()),
        "iterations": ahead.height,
        "iterations_holding_it": int((shares["flagged_samples"] > 0).sum()),
        "share_of_remaining_samples": flagged / total if total else 0.0,
        "dense_share": dense_share,
        "dense_iterations": dense.height,
        "densest": [
            [int(i), round(float(s), 4)] for i, s in densest.select("iteration", "share").rows()
        ],
    }


def ahead_advice(summary: dict[str, Any]) -> str:
    """One sentence: can skipping iterations avoid the culprit ahead, or must the data change?"""
    share = summary.get("share_of_remaining_samples", 0.0)
    held = summary.get("iterations_holding_it", 0)
    n = summary.get("iterations", 0)
    if not n or held == 0:
        return "it does not occur again before the end of training"
    if held / n > 0.5:
        return (
            f"it is in {held:,} of the {n:,} remaining iterations ({100 * share:.1f}% of their "
            "samples): skipping iterations cannot avoid it; remove its documents (block list in "
            "skip.json) and rebuild the index, or accept the rest"
        )
    return (
        f"it is in {held:,} of the {n:,} remaining iterations ({100 * share:.2f}% of their "
        "samples); --skip-ahead adds the densest of them to the skip ranges"
    )


def documents_by_dataset(culprit: pl.DataFrame) -> dict[str, list[int]]:
    """The block list: per dataset, sorted culprit doc_ids."""
    out: dict[str, list[int]] = {}
    for (name,), part in culprit.group_by(["dataset"], maintain_order=True):
        out[str(name)] = sorted(int(d) for d in part["doc_id"].unique())
    return dict(sorted(out.items()))


def flagged_documents(seen: pl.DataFrame, window_docs: pl.DataFrame) -> pl.DataFrame:
    """The culprit documents of the window whose garbage or spam score is flagged."""
    from forensics.score import FLAG_THRESHOLD

    if not seen.height:
        return seen.select("dataset", "doc_id")
    scores = window_docs.select("dataset", "doc_id", "garbage_score", "spam_score")
    return (
        seen.select("dataset", "doc_id")
        .join(scores, on=["dataset", "doc_id"], how="inner")
        .filter(
            (pl.col("garbage_score") >= FLAG_THRESHOLD) | (pl.col("spam_score") >= FLAG_THRESHOLD)
        )
        .select("dataset", "doc_id")
    )


def source_documents(config: RunConfig, ranked: pl.DataFrame, ids: list[str]) -> pl.DataFrame:
    """Every document of the blamed *sources*, not only those the window happened to hold.

    A culprit crawl batch has documents the window never drew; they come later in the run (the
    forward exposure must count them) and belong in the block list. For each source cluster among
    `ids` (facet=key), the Megatron manifests give all its documents: (dataset, doc_id, cluster).
    Embedding clusters have no such definition and add nothing here.
    """
    from forensics.cluster.source import MISSING_KEY

    frames = []
    stages = getattr(config.data, "data_stages", None) or []
    specs = {spec.display_name: spec for stage in stages for spec in stage.blend}
    chosen = ranked.filter(pl.col("id").is_in(ids) & (pl.col("kind") == "source"))
    for row in chosen.select("id", "facet", "key").iter_rows(named=True):
        for name, spec in specs.items():
            if row["facet"] == "dataset":
                if row["key"] != name:
                    continue
                from dataloaders.megatron.indexed import IndexedDataset

                n = IndexedDataset(spec.prefix).num_documents
                doc_ids = pl.Series("doc_id", range(n), dtype=pl.Int64)
            else:
                if spec.manifest is None or not spec.manifest.is_file():
                    continue
                manifest = pl.read_parquet(spec.manifest)
                if row["facet"] not in manifest.columns:
                    continue
                key = pl.col(row["facet"]).cast(pl.Utf8).fill_null(MISSING_KEY)
                doc_ids = manifest.filter(key == row["key"])["doc_id"].cast(pl.Int64)
            frames.append(
                pl.DataFrame({"doc_id": doc_ids}).with_columns(
                    pl.lit(name).alias("dataset"), pl.lit(row["id"]).alias("cluster")
                )
            )
    if not frames:
        return pl.DataFrame(schema={"dataset": pl.Utf8, "doc_id": pl.Int64, "cluster": pl.Utf8})
    return pl.concat(frames).select("dataset", "doc_id", "cluster")


# -- the pipeline -------------------------------------------------------------------------------


def _config_and_origin(config: Path | str | RunConfig) -> tuple[RunConfig, str]:
    """The run config and a few words saying where it came from (for the marker and messages):
    a YAML path is loaded; a RunConfig (e.g. from --megatron-args) is taken as is."""
    if isinstance(config, RunConfig):
        origin = str(config.source) if config.source is not None else "--megatron-args"
        return config, origin
    return load_config(config), str(Path(config).resolve())


def run_spike(config: Path | str | RunConfig, out: Path, options: SpikeOptions) -> SpikeResult:
    """The whole command. Raises ForensicsError for bad input before writing anything.

    `config`: a YAML config path, or a RunConfig built elsewhere (the training job's Megatron
    arguments, `forensics.megatron_args.resolve_run_config`)."""
    from forensics.replay import check_window, open_replayer

    opts = options
    if opts.after < 0:
        raise ForensicsError(f"--after {opts.after}: must be >= 0")
    if not 0.0 <= opts.ahead_share <= 1.0:
        raise ForensicsError(f"--ahead-share {opts.ahead_share}: must be in [0, 1]")
    check_threshold(opts.threshold)
    if opts.trainer is not None:
        check_trainer(opts.trainer)
    config, origin = _config_and_origin(config)
    config_hash = config.config_hash()
    out = Path(out)
    check_output_dir(out, config_hash, opts.step, opts.force)
    if opts.rescore is not None:  # a wrong checkpoint or losses path fails before any work
        opts.rescore.check()
    stages = Stages(opts.progress)
    hits: dict[str, bool] = {}
    notes: list[str] = []

    with stages.stage("open", f"config {origin}", spinner=True):
        replayer = open_replayer(config)
        window = check_window(replayer, opts.step, opts.window)
        starts = stage_starts(config)
        baseline, how = plan_baseline(window, starts, opts.baseline, opts.baseline_offset)
        for s in crossings(window, starts):
            notes.append(f"the window crosses the start of a data stage at iteration {s}")
        fingerprint = json.loads(json.dumps(replayer.fingerprint(), default=str))
    notes.append(f"baseline {baseline[0]}-{baseline[1]}: {how}")
    cache = out / ".cache"
    # After the inputs are checked (bad input leaves nothing behind); held until the return.
    lock = hold_lock(cache, "forensics spike")
    write_json_atomic(
        cache / MARKER,
        {"config_hash": config_hash, "step": opts.step, "config": origin},
    )
    key = cache_key(config=config_hash, data=fingerprint, window=window, baseline=baseline)

    # 1. replay: which samples (and document segments) each iteration consumed
    def _replay() -> pl.DataFrame:
        parts = [
            replayer.replay(a, b, text=False, progress=opts.progress).with_columns(
                pl.lit(side).alias("side")
            )
            for side, (a, b) in (("window", window), ("baseline", baseline))
        ]
        return pl.concat(parts, how="diagonal_relaxed")

    with stages.stage(
        "replay", f"window {window[0]}-{window[1]}, baseline {baseline[0]}-{baseline[1]}"
    ):
        replay = cached_table(cache / f"replay-{key}.parquet", _replay, hits, "replay")
        if hasattr(replayer, "save_cache"):
            replayer.save_cache()
    win_replay = replay.filter(pl.col("side") == "window")

    # 2. documents: each distinct document decoded once, whole
    distinct = replay.select("dataset", "doc_id").unique().sort("dataset", "doc_id")
    with stages.stage("decode", f"{distinct.height:,} distinct documents"):
        docs = cached_table(
            cache / f"docs-{key}.parquet",
            lambda: replayer.documents(distinct, progress=opts.progress),
            hits,
            "decode",
        )

    # 3. scores: garbage and spam, once per document
    from forensics.score import score_table

    with stages.stage("score", f"{docs.height:,} documents"):
        score_file = cache / f"scores-{key}-{module_version('forensics.score')}.parquet"
        scored = cached_table(
            score_file,
            lambda: score_table(docs, "text", progress=opts.progress),
            hits,
            "score",
        )
        for stale in cache.glob(f"scores-{key}-*.parquet"):  # an older scorer's, never read again
            if stale != score_file:
                stale.unlink(missing_ok=True)
    sides = replay.select("side", "dataset", "doc_id").unique()
    window_docs = scored.join(
        sides.filter(pl.col("side") == "window").drop("side"), on=["dataset", "doc_id"]
    ).sort("dataset", "doc_id")
    baseline_docs = scored.join(
        sides.filter(pl.col("side") == "baseline").drop("side"), on=["dataset", "doc_id"]
    ).sort("dataset", "doc_id")

    # 4. clusters and verdicts
    from forensics.cluster import (
        assign_verdicts,
        cluster_embeddings,
        cluster_sources,
        culprit_docs,
        describe_sample,
    )
    from forensics.cluster.embedding import default_cap

    with stages.stage("cluster", "by source facet", spinner=True):
        source_clusters = cluster_sources(window_docs, baseline_docs)
    cap = default_cap(opts.embed_model, opts.device) if opts.embed_cap is None else opts.embed_cap
    assignments = None
    embedding_note = None
    parts = [source_clusters]
    if cap > 0:
        with stages.stage("embed", f"up to {cap:,} documents, then k-means"):
            emb_clusters, assignments = cluster_embeddings(
                window_docs,
                baseline_docs,
                cap=cap,
                model=opts.embed_model,
                device=opts.device,
                cache_dir=cache / "embeddings",
                progress=opts.progress,
            )
            embedding_note = describe_sample(assignments, cap)
        parts.append(emb_clusters)
    ranked = assign_verdicts(pl.concat(parts, how="diagonal_relaxed"))
    if opts.culprits:
        unknown = sorted(set(opts.culprits) - set(ranked["id"].to_list()))
        if unknown:
            raise ForensicsError(f"--culprit {', '.join(unknown)}: no such cluster in this window")
    model_view = None
    if opts.rescore is not None:  # the model's evidence may demote a data-side culprit
        from forensics.rescore import rescore_stage

        with stages.stage("rescore", "the window's samples with the checkpoint"):
            ranked, model_view = rescore_stage(
                replayer, replay, ranked, window_docs, opts.rescore, cache, out, fingerprint, hits
            )
    seen = culprit_docs(ranked, window_docs, only=list(opts.culprits) if opts.culprits else None)
    blamed = sorted(seen["cluster"].unique().to_list()) if seen.height else []
    culprit = (
        pl.concat([seen, source_documents(config, ranked, blamed)])
        .unique(["dataset", "doc_id"], keep="first", maintain_order=True)
        .sort("dataset", "doc_id")
    )

    # 5. rollback, skip ranges, forward exposure
    onset = onset_iteration(win_replay, culprit) if culprit.height else None
    # The onset matters for the rollback only when the blamed data is new in the window (a
    # mixture switch); data that was always there has no onset to roll back before.
    new = bool(ranked.filter(pl.col("id").is_in(blamed))["new_in_window"].any())
    rollback = recommend_rollback(
        opts.step, config.available_checkpoints(), onset=onset if new else None
    )
    last_it = replayer.last_iteration
    scope = (rollback.resume_iteration, min(opts.step + opts.after, last_it))
    docs_key = cache_key(docs=documents_by_dataset(culprit))
    skip: dict[str, Any]
    with stages.stage("exposure", f"culprit documents in {scope[0]}-{last_it}", spinner=True):
        exposure = _exposure(replayer, culprit, scope, cache, config_hash, docs_key, hits, "scope")
        ahead = (
            _exposure(
                replayer,
                culprit,
                (scope[1] + 1, last_it),
                cache,
                config_hash,
                docs_key,
                hits,
                "ahead",
            )
            if scope[1] < last_it
            else pl.DataFrame(
                schema={"iteration": pl.Int64, "samples": pl.Int64, "flagged_samples": pl.Int64}
            )
        )
    chosen = select_iterations(exposure, opts.threshold)
    ahead_info = ahead_summary(ahead, opts.ahead_share)
    if opts.skip_ahead and ahead.height:
        dense = ahead.filter(
            (pl.col("flagged_samples") > 0)
            & (pl.col("flagged_samples") >= opts.ahead_share * pl.col("samples"))
        )
        chosen = sorted(set(chosen) | set(dense["iteration"].to_list()))
    trainer = opts.trainer or config.training.trainer
    schedule = getattr(replayer, "schedule", None) or Schedule(config.training)
    ranges, composed, joined, flags = plan_flags(trainer, chosen, schedule, rollback.iteration)
    if composed:
        notes.append(
            f"{len(composed)} iterations after the rollback were skipped by an earlier restart "
            "(training.applied_skips) and are skipped again"
        )
    if ranges and flags[trainer].flag is None:
        raise ForensicsError(
            f"no exact {trainer} skip flag for iterations {ranges[0][0]}-{ranges[-1][1]}: "
            f"{flags[trainer].refusal}. Roll back to a checkpoint where it is exact, or rerun "
            "with --trainer megatron-lm to get the block list and remove its documents"
        )
    costed = pl.concat([exposure, ahead]) if opts.skip_ahead else exposure
    coll = collateral(costed, ranges)
    last_skipped = max([scope[1], *(b for _, b in ranges)])
    iteration_samples = replayer.iteration_samples(scope[0], last_skipped)
    tracker = flags[trainer].values if trainer in TRACKED_TRAINERS else None
    skip = SkipPlan(
        step=opts.step,
        window=list(window),
        rollback=rollback.to_dict(),
        scope=list(scope),
        threshold=opts.threshold,
        trainer=trainer,
        iterations=[list(r) for r in ranges],
        samples=sample_ranges(iteration_samples, ranges),
        documents=documents_by_dataset(culprit),
        culprit_clusters=blamed,
        documents_seen_in_window=seen.height,
        # The narrow alternative: only the culprit documents the window drew that a scorer
        # flagged. When the blamed source is a whole dataset (no finer provenance), this is the
        # list to block if removing the dataset is too much.
        documents_flagged=documents_by_dataset(flagged_documents(seen, window_docs)),
        flags=flags,
        collateral=coll | {"iterations_joined_for_trainer": joined},
        ahead=ahead_info | {"skip_ahead": opts.skip_ahead, "advice": ahead_advice(ahead_info)},
        fingerprint=fingerprint,
        notes=notes,
        composed=composed,
        tracker_file=TRACKER_FILE if tracker else None,
    )

    # 6. report and files
    from forensics.report import build_report, print_summary, write_report

    loss = _loss_curve(config, notes)
    with stages.stage("report", f"to {out}", spinner=True):
        report = build_report(
            opts.step,
            window,
            baseline,
            rollback.iteration,
            ranked,
            window_docs,
            baseline_docs,
            replay=win_replay,
            assignments=assignments,
            embedding_note=embedding_note,
            loss=loss,
            skip=report_skip(skip),
            rollback_note=rollback.note,
            notes=notes,
            model=model_view,
        )
        # Everything is written into a staging folder first and published as one step.
        staging = cache / "staging"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        write_report(report, staging)
        write_json_atomic(staging / SKIP_FILE, skip.to_dict())
        write_text_atomic(staging / ARGS_FILE, megatron_args_text(skip))
        for name, text in restart_flag_files(skip).items():
            write_text_atomic(staging / name, text)
        if tracker:
            when = time.strftime("%Y-%m-%d %H:%M:%S")
            write_text_atomic(staging / TRACKER_FILE, tracker_text(tracker, when))
        publish(staging, out, OUTPUT_PATTERNS)
    if opts.progress:
        print_summary(report)
    lock.close()
    return SpikeResult(
        out=out,
        skip=skip,
        report=report,
        rollback=rollback,
        window=window,
        baseline=baseline,
        timings=stages.timings,
        cached=hits,
        notes=notes,
    )


def _exposure(
    replayer: Any,
    culprit: pl.DataFrame,
    span: tuple[int, int],
    cache: Path,
    config_hash: str,
    docs_key: str,
    hits: dict[str, bool],
    name: str,
) -> pl.DataFrame:
    """Replayer.exposure for the culprit documents over `span`, cached."""
    key = cache_key(config=config_hash, docs=docs_key, span=span)
    docs = culprit.select("dataset", "doc_id").unique()
    return cached_table(
        cache / f"exposure-{key}.parquet",
        lambda: replayer.exposure(docs, span[0], span[1]),
        hits,
        f"exposure-{name}",
    )


def module_version(package: str) -> str:
    """A hash of a package's source files: cached scores are redone when the scorer changes,
    a benchmark run is rebuilt when its builder changes."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return "0"
    digest = hashlib.sha256()
    for root in spec.submodule_search_locations:
        for path in sorted(Path(root).rglob("*.py")):
            digest.update(path.read_bytes())
    return digest.hexdigest()[:8]


def _loss_curve(config: RunConfig, notes: list[str]) -> pl.DataFrame | None:
    """The training log's loss (for the report's overlay), or None with a note."""
    if config.log is None:
        return None
    try:
        from forensics.triage.readers import read_log

        frame = read_log(config.log)
        return frame.select("step", "loss")
    except ForensicsError as err:
        notes.append(f"training log not overlaid: {err}")
    except ImportError:
        notes.append("training log not overlaid: the log reader is not installed")
    return None


def report_skip(skip: SkipPlan) -> dict[str, Any]:
    """The skip plan as the report's first screen shows it (counts, not the block list)."""
    coll = skip.collateral
    shown = {
        "clean_samples_skipped": coll["clean_samples_skipped"],
        "culprit_samples_missed": coll["culprit_samples_missed"],
    }
    return {
        "iterations": skip.iterations,
        "collateral": shown,
        "documents": sum(len(v) for v in skip.documents.values()),
        "ahead": skip.ahead["advice"],
        "trainer": skip.trainer,
        "flags": {name: flag.to_dict() for name, flag in skip.flags.items()},
        "tracker_file": skip.tracker_file,
    }


def restart_flag_files(skip: SkipPlan) -> dict[str, str]:
    """restart-<trainer>.flags: only flags, no comments, the checkpoint pin first where it is a
    flag, so `$(cat restart-megatron-lm.flags)` can go into the launch command as it is."""
    out = {}
    for name, flag in skip.flags.items():
        if not skip.iterations or not flag.flag:
            continue
        pin = f"{flag.pin} " if flag.pin and flag.pin.startswith("--") else ""
        out[f"restart-{name}.flags"] = f"{pin}{flag.flag}\n"
    return out


def megatron_args_text(skip: SkipPlan) -> str:
    """megatron_args.txt: each trainer's flag, ready to paste, the chosen trainer first, with
    what its numbers mean and what the restart then does differently."""
    rb = skip.rollback
    lines = [
        f"# forensics spike at iteration {skip.step}: restart from checkpoint iteration "
        f"{rb['iteration']} (the job runs {rb['resume_iteration']} first).",
        "# Valid only for the run fingerprinted in skip.json (check: forensics check-skip).",
    ]
    for name, flag in skip.flags.items():
        chosen = " (this run's trainer)" if name == skip.trainer else ""
        lines += ["", f"# {flag.semantics}{chosen}"]
        if not skip.iterations:
            lines.append("# (nothing to skip)")
        elif flag.flag is None:
            lines.append(f"# NO EXACT FLAG: {flag.refusal}.")
            lines.append("# Remove the block list's documents (skip.json: documents) instead.")
        else:
            if flag.pin and flag.pin.startswith("--"):
                lines.append(f"{flag.pin} {flag.flag}")
            else:
                lines.append(flag.flag)
                lines.append(f"# load the rollback checkpoint: {flag.pin}")
            lines.append(f"# then: {flag.consequence}")
        if name == skip.trainer and skip.tracker_file and flag.flag:
            lines.append(
                f"# or, instead of the list: {how_to_pass(skip.tracker_file)} (pass a copy: "
                "the job appends to it)"
            )
    return "\n".join(lines) + "\n"
