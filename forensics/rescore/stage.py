"""The rescoring stage: pick the samples, get their per-token losses, z-score them.

    result = rescore(replayer, replay, options, cache_dir=..., fingerprint=...)

`replay` is a replay table with a `side` column ("window" / "baseline"), as the spike pipeline
builds it. Which samples: the whole window when it fits under `cap`, else a sample stratified by
each sample's main dataset (the one holding most of its tokens), proportional with at least one
per dataset, so a small new dataset is not missed; then as many baseline samples (seeded random).
Where the losses come from: a checkpoint run here (`checkpoint`), or a file computed elsewhere
over the exported samples (`losses`, see `read_losses`): the tables downstream are the same.

Cache: `<cache_dir>/rescore-<key>.npz` keyed by the checkpoint's content digest, the chosen
samples, the run fingerprint, dtype and whether gradient norms were asked for; a different
checkpoint (or sample) recomputes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dataloaders.atomic import atomic_path
from dataloaders.progress import progress_bar as _progress
from forensics.errors import ForensicsError
from forensics.rescore.checkpoint import (
    check_checkpoint,
    check_vocab,
    checkpoint_digest,
    grad_norms,
    load_causal_lm,
    token_losses,
)
from forensics.rescore.export import (
    gather_tokens,
    require_token_files,
    sample_length,
    sample_tables,
)
from forensics.rescore.losses import read_losses
from forensics.rescore.metrics import sample_metrics, segment_metrics, zscore

DEFAULT_CAP = 512  # window samples scored on a CPU in a few minutes with a small model


@dataclass(frozen=True)
class RescoreOptions:
    """How to rescore: one of checkpoint / losses, and the knobs for running the model."""

    checkpoint: Path | None = None
    losses: Path | None = None
    device: str = "cpu"
    dtype: str = "float32"
    batch_size: int = 8
    cap: int = DEFAULT_CAP
    grad_norm: bool = False
    seed: int = 0
    progress: bool = True

    def check(self) -> None:
        """Bad combinations, before any work."""
        if (self.checkpoint is None) == (self.losses is None):
            raise ForensicsError("rescoring needs exactly one of --checkpoint DIR or --losses FILE")
        if self.batch_size < 1:
            raise ForensicsError(f"--batch-size {self.batch_size}: must be >= 1")
        if self.cap < 1:
            raise ForensicsError(f"--rescore-cap {self.cap}: must be >= 1")
        if self.losses is not None and self.grad_norm:
            raise ForensicsError("--grad-norm needs --checkpoint (a losses file carries its own)")
        if self.checkpoint is not None:
            check_checkpoint(self.checkpoint)
        elif not Path(self.losses).is_file():  # type: ignore[arg-type]
            raise ForensicsError(f"{self.losses}: losses file not found")


@dataclass
class Rescore:
    """The scored samples and segments (z-scored against the baseline) and how they were made.

    samples:  row, side, iteration, position, sample_index, loss, max_token_loss, peak_token,
              grad_norm (null without --grad-norm), loss_z, max_token_z, grad_norm_z
    segments: row, seg, dataset, doc_id, token_start, token_end, start, end (in the sample),
              loss_sum, tokens, loss, max_token_loss, peak_token, loss_z, max_token_z
              (per-sample losses only: loss columns null; clusters then use the sample's z)
    tokens:   the scored samples' tokens, row-aligned (for the report's peak spans)
    """

    samples: pl.DataFrame
    segments: pl.DataFrame
    tokens: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def token_level(self) -> bool:
        return self.info.get("level") == "token"


def _main_dataset(segments: pl.DataFrame) -> pl.DataFrame:
    """row -> the dataset holding most of the sample's tokens."""
    return (
        segments.with_columns((pl.col("end") - pl.col("start")).alias("_n"))
        .group_by("row", "dataset")
        .agg(pl.col("_n").sum())
        .sort(["row", "_n", "dataset"], descending=[False, True, False])
        .unique("row", keep="first")
        .select("row", pl.col("dataset").alias("stratum"))
    )


def choose_samples(
    samples: pl.DataFrame, segments: pl.DataFrame, cap: int, seed: int
) -> np.ndarray:
    """Rows to score: all window rows when they fit under `cap`, else a stratified sample;
    then as many baseline rows (all when fewer). Sorted row numbers."""
    rng = np.random.default_rng(seed)
    window = samples.filter(pl.col("side") == "window").join(_main_dataset(segments), on="row")
    base = samples.filter(pl.col("side") == "baseline")["row"].to_numpy()
    if window.height <= cap:
        chosen = window["row"].to_numpy()
    else:
        groups = window.group_by("stratum", maintain_order=True).agg(pl.col("row")).sort("stratum")
        sizes = np.array([len(r) for r in groups["row"]])
        alloc = np.maximum(1, np.floor(cap * sizes / sizes.sum()).astype(int))
        alloc = np.minimum(alloc, sizes)
        while alloc.sum() > cap:  # the floors of 1 can overshoot: trim the largest strata
            alloc[np.argmax(alloc)] -= 1
        while alloc.sum() < cap and (alloc < sizes).any():
            spare = np.flatnonzero(alloc < sizes)
            alloc[spare[np.argmax(sizes[spare] - alloc[spare])]] += 1
        parts = [
            rng.choice(np.asarray(rows), size=int(k), replace=False)
            for rows, k in zip(groups["row"], alloc, strict=True)
        ]
        chosen = np.concatenate(parts)
    n_base = min(len(chosen), len(base))
    picked_base = rng.choice(base, size=n_base, replace=False) if n_base else base[:0]
    return np.sort(np.concatenate([chosen, picked_base]).astype(np.int64))


def _renumber(samples: pl.DataFrame, segments: pl.DataFrame, rows: np.ndarray):
    """Keep `rows` and renumber them 0..k-1 in the same order."""
    mapping = pl.DataFrame({"row": rows, "_new": np.arange(len(rows), dtype=np.int64)})
    s = samples.join(mapping, on="row").sort("_new").drop("row").rename({"_new": "row"})
    g = segments.join(mapping, on="row").sort(["_new", "seg"]).drop("row").rename({"_new": "row"})
    return s.select("row", *[c for c in s.columns if c != "row"]), g.select(
        "row", *[c for c in g.columns if c != "row"]
    )


def _key(*parts: Any) -> str:
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _model_losses(
    options: RescoreOptions,
    tokens: np.ndarray,
    cache_file: Path | None,
    hits: dict[str, bool],
) -> tuple[np.ndarray, np.ndarray | None]:
    """(token losses [n, L], grad norms [n] or None) from the checkpoint, cached."""
    if cache_file is not None and cache_file.is_file():
        try:
            with np.load(cache_file, allow_pickle=False) as saved:
                losses = saved["losses"]
                norms = saved["grad_norm"] if "grad_norm" in saved.files else None
            if losses.shape == (len(tokens), tokens.shape[1] - 1):
                hits["rescore"] = True
                return losses, norms
        except (OSError, ValueError, KeyError):
            pass  # a damaged cache file is recomputed, never trusted

    model = load_causal_lm(options.checkpoint, options.device, options.dtype)  # type: ignore[arg-type]
    check_vocab(model, tokens, str(options.checkpoint))
    with _progress(options.progress, len(tokens), "rescoring samples") as advance:
        losses = token_losses(
            model, tokens, batch_size=options.batch_size, device=options.device, advance=advance
        )
    norms = None
    if options.grad_norm:
        with _progress(options.progress, len(tokens), "per-sample gradient norms") as advance:
            norms = grad_norms(model, tokens, device=options.device, advance=advance)
    if cache_file is not None:
        with atomic_path(cache_file) as tmp:
            with open(tmp, "wb") as stream:
                arrays = {"losses": losses} | ({"grad_norm": norms} if norms is not None else {})
                np.savez(stream, **arrays)
    hits["rescore"] = False
    return losses, norms


def rescore(
    replayer: Any,
    replay: pl.DataFrame,
    options: RescoreOptions,
    *,
    cache_dir: Path | None = None,
    fingerprint: Any = None,
    hits: dict[str, bool] | None = None,
) -> Rescore:
    """Score the window's samples and a baseline sample of equal size; z-score both."""
    options.check()
    require_token_files(replayer)
    hits = hits if hits is not None else {}
    if "side" not in replay.columns or replay.filter(pl.col("side") == "baseline").height == 0:
        raise ForensicsError("rescoring needs baseline samples (the replay has none)")
    samples, segments = sample_tables(replay)
    length = sample_length(replayer)
    info: dict[str, Any] = {
        "window_samples_total": samples.filter(pl.col("side") == "window").height,
        "cap": options.cap,
    }
    if options.losses is not None:
        got = _losses_from_file(replayer, samples, segments, options, length)
    else:
        got = _losses_from_checkpoint(
            replayer, samples, segments, options, cache_dir, fingerprint, hits
        )
    samples, segments, norms = got.samples, got.segments, got.norms
    info |= got.info
    info["level"] = "token" if got.token_level else "sample"
    if got.token_level:
        per_sample = sample_metrics(got.losses)  # type: ignore[arg-type]
        per_seg = segment_metrics(got.losses, segments)  # type: ignore[arg-type]
    else:
        per_sample = {k: v for k, v in got.extra.items() if k in ("loss", "max_token_loss")}
        per_seg = {}
        norms = got.extra.get("grad_norm", norms)
    is_base = (samples["side"] == "baseline").to_numpy()
    table = samples.with_columns(
        [pl.Series(k, v) for k, v in per_sample.items()]
        + [
            pl.Series("grad_norm", norms, dtype=pl.Float64)
            if norms is not None
            else pl.lit(None, dtype=pl.Float64).alias("grad_norm")
        ]  # fmt: skip
    )
    stats: dict[str, Any] = {}
    table = _zscore_samples(table, is_base, stats)
    seg_table = segments.with_columns([pl.Series(k, v) for k, v in per_seg.items()])
    if per_seg:
        seg_table = _zscore_segments(seg_table, is_base, stats)
    info |= {
        "window_samples": int((~is_base).sum()),
        "baseline_samples": int(is_base.sum()),
        "baseline_stats": stats,
    }
    return Rescore(table, seg_table, np.asarray(got.tokens), info)


@dataclass
class _Losses:
    """The scored samples and segments (renumbered), their tokens, and where the losses came
    from: per-token losses (token_level) or only the per-sample columns of a losses file."""

    samples: pl.DataFrame
    segments: pl.DataFrame
    tokens: np.ndarray
    losses: np.ndarray | None
    token_level: bool
    info: dict[str, Any]
    norms: np.ndarray | None = None
    extra: dict[str, np.ndarray] = field(default_factory=dict)


def _losses_from_file(
    replayer: Any,
    samples: pl.DataFrame,
    segments: pl.DataFrame,
    options: RescoreOptions,
    length: int,
) -> _Losses:
    """Losses computed elsewhere over the exported samples (`read_losses`)."""
    loaded = read_losses(Path(options.losses), samples, length - 1)  # type: ignore[arg-type]
    samples, segments = _renumber(samples, segments, loaded.rows)
    return _Losses(
        samples,
        segments,
        gather_tokens(replayer, segments),
        loaded.token_losses,
        loaded.token_losses is not None,
        {"source": f"losses file {options.losses}", "digest": loaded.digest},
        extra=loaded.sample_columns,
    )


def _losses_from_checkpoint(
    replayer: Any,
    samples: pl.DataFrame,
    segments: pl.DataFrame,
    options: RescoreOptions,
    cache_dir: Path | None,
    fingerprint: Any,
    hits: dict[str, bool],
) -> _Losses:
    """Per-token losses (and gradient norms when asked) of the chosen samples, from the
    checkpoint run here, or from the cache keyed by its content digest."""
    rows = choose_samples(samples, segments, options.cap, options.seed)
    samples, segments = _renumber(samples, segments, rows)
    tokens = gather_tokens(replayer, segments)
    digest = checkpoint_digest(options.checkpoint)  # type: ignore[arg-type]
    key = _key(
        digest,
        fingerprint,
        samples.select("iteration", "position").rows(),
        options.dtype,
        options.grad_norm,
    )
    cache_file = None if cache_dir is None else Path(cache_dir) / f"rescore-{key}.npz"
    losses, norms = _model_losses(options, tokens, cache_file, hits)
    info = {
        "source": f"checkpoint {options.checkpoint}",
        "digest": digest,
        "device": options.device,
        "dtype": options.dtype,
    }
    return _Losses(samples, segments, tokens, losses, True, info, norms=norms)


def _zscore_samples(
    table: pl.DataFrame, is_base: np.ndarray, stats: dict[str, Any]
) -> pl.DataFrame:
    """loss_z, max_token_z, grad_norm_z against the baseline samples (null where not scored);
    the baseline's mean and sd go into `stats`."""
    for col, z in (
        ("loss", "loss_z"),
        ("max_token_loss", "max_token_z"),
        ("grad_norm", "grad_norm_z"),
    ):
        if col in table.columns and table[col].null_count() < table.height:
            values = table[col].cast(pl.Float64).to_numpy()
            zs, mu, sd = zscore(values, values[is_base], f"per-sample {col.replace('_', ' ')}")
            table = table.with_columns(pl.Series(z, zs))
            stats[col] = {"baseline_mean": mu, "baseline_sd": sd}
        else:
            table = table.with_columns(pl.lit(None, dtype=pl.Float64).alias(z))
    return table


def _zscore_segments(
    seg_table: pl.DataFrame, is_base: np.ndarray, stats: dict[str, Any]
) -> pl.DataFrame:
    """Per-segment loss_z and max_token_z against the baseline samples' segments."""
    seg_base = np.isin(seg_table["row"].to_numpy(), np.flatnonzero(is_base))
    for col, z in (("loss", "loss_z"), ("max_token_loss", "max_token_z")):
        values = seg_table[col].to_numpy()
        zs, mu, sd = zscore(values, values[seg_base], f"per-segment {col.replace('_', ' ')}")
        seg_table = seg_table.with_columns(pl.Series(z, zs).fill_nan(None))
        stats[f"segment_{col}"] = {"baseline_mean": mu, "baseline_sd": sd}
    return seg_table


def rescore_parquet(result: Rescore) -> pl.DataFrame:
    """rescore.parquet: one row per scored sample, its document segments as a list of structs."""
    seg_cols = [c for c in result.segments.columns if c not in ("row", "seg")]
    nested = result.segments.group_by("row", maintain_order=True).agg(
        pl.struct(seg_cols).alias("segments")
    )
    return result.samples.join(nested, on="row", how="left").sort("row")
