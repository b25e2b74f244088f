"""The exact token sequences of a window, as a directory a team can run its own model over.

Layout of an export directory (written to a temporary sibling, then renamed into place):

    tokens.npy        [n_samples, seq_length + 1] the tokens each sample fed (Megatron builds a
                      sample of seq_length + add_extra_token tokens: inputs = [:-1], labels = [1:])
    samples.parquet   row (0..n-1, the tokens.npy row), iteration, position (in the global batch),
                      sample_index (global), side (window / baseline)
    segments.parquet  row, seg (0.. within the sample), dataset, doc_id, token_start, token_end
                      (within the document), start, end (within the sample's tokens)
    meta.json         format marker, seq_length, sample_length, dtype, window, baseline, step,
                      the run's fingerprint (what the export is valid for)

Why a directory and .npy: a team loads tokens.npy with one `np.load(mmap_mode="r")` in any
framework; the index tables say which documents each row holds.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dataloaders.megatron.tokens import gather_samples
from dataloaders.progress import progress_bar as _progress
from forensics.errors import ForensicsError

EXPORT_FORMAT = "forensics-tokens-v1"
SAMPLE_KEY = ["iteration", "position"]


def require_megatron(replayer: Any) -> None:
    """Token export and rescoring read `.bin` tokens: Megatron runs only (for now)."""
    if not replayer.token_files:
        raise ForensicsError(
            "token export and rescoring support Megatron runs (data.format: megatron) only; "
            "this run's replayer has no token files"
        )


def is_olmo_core(replayer: Any) -> bool:
    """An OLMo-core replayer: a sample is one dataset instance (`instance_tokens`)."""
    return bool(replayer.instance_samples)


def require_token_files(replayer: Any) -> None:
    """Rescoring reads each sample's exact tokens: Megatron `.bin` files or OLMo-core's numpy
    token files (a sample there is one fixed-size instance)."""
    if not is_olmo_core(replayer):
        require_megatron(replayer)


def sample_tables(replay: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(samples, segments) from a replay table (one row per document segment, replay order).

    Samples are numbered `row` 0..n-1 by (iteration, position); a sample's segments keep their
    replay order (the order Megatron concatenates them) and get `start`/`end` inside the sample.
    """
    cols = ["iteration", "position", "sample_index"]
    side = ["side"] if "side" in replay.columns else []
    ordered = replay.with_row_index("_o").sort([*SAMPLE_KEY, "_o"])
    samples = (
        ordered.select(*cols, *side)
        .unique(SAMPLE_KEY, keep="first", maintain_order=True)
        .with_row_index("row")
        .with_columns(pl.col("row").cast(pl.Int64))
    )
    if not side:
        samples = samples.with_columns(pl.lit("window").alias("side"))
    segs = ordered.join(samples.select(*SAMPLE_KEY, "row"), on=SAMPLE_KEY, how="left")
    segs = segs.sort(["row", "_o"])
    length = pl.col("token_end") - pl.col("token_start")
    # OLMo-core: the instance each sample is (its data stage and index in that stage's dataset)
    instance = ["stage", "dataset_sample"]
    if not set(instance) <= set(replay.columns):
        instance = []
    segments = segs.select(
        "row",
        pl.int_range(pl.len()).over("row").cast(pl.Int32).alias("seg"),
        "dataset",
        "doc_id",
        "token_start",
        "token_end",
        (length.cum_sum().over("row") - length).alias("start"),
        length.cum_sum().over("row").alias("end"),
        *instance,
    )
    return samples, segments


def sample_length(replayer: Any) -> int:
    """Tokens per sample: seq_length + the extra label token (megatron-core's default); an
    OLMo-core instance is `sequence_length` tokens, inputs and labels both cut from it."""
    if is_olmo_core(replayer):
        return int(replayer.data.sequence_length)
    return int(replayer.data.seq_length) + int(replayer.extra)


def _instance_rows(replayer: Any, segments: pl.DataFrame) -> np.ndarray:
    """tokens[n_samples, sequence_length] of OLMo-core samples: each row is the dataset
    instance its segments came from (`instance_tokens`, what the library's dataset returns)."""
    firsts = segments.filter(pl.col("seg") == 0).sort("row")
    rows = [
        replayer.instance_tokens(int(i), int(st))
        for st, i in zip(firsts["stage"], firsts["dataset_sample"], strict=True)
    ]
    if not rows:
        return np.zeros((0, sample_length(replayer)), dtype=np.int64)
    return np.stack(rows)


def gather_tokens(
    replayer: Any, segments: pl.DataFrame, out: np.ndarray | None = None, progress: bool = False
) -> np.ndarray:
    """tokens[n_samples, sample_length] for the segments table (rows 0..n-1, in order)."""
    if is_olmo_core(replayer):
        return _instance_rows(replayer, segments)
    require_megatron(replayer)
    datasets = {name: replayer.datasets[spec.prefix] for name, spec in replayer.specs.items()}
    n = int(segments["row"].max()) + 1 if segments.height else 0
    with _progress(progress, n, "gathering tokens") as advance:
        try:
            return gather_samples(
                datasets,
                segments["dataset"].to_numpy(),
                segments["doc_id"].to_numpy(),
                segments["token_start"].to_numpy(),
                segments["token_end"].to_numpy(),
                segments["row"].to_numpy(),
                sample_length(replayer),
                out=out,
                advance=advance,
            )
        except ValueError as err:
            raise ForensicsError(f"token export: {err}") from None


def token_dtype(replayer: Any) -> np.dtype[Any]:
    """The smallest dtype holding every dataset's tokens (uint16 below 65,500 ids)."""
    return np.result_type(*[ds.dtype for ds in replayer.datasets.values()])


def check_export_target(out: Path, force: bool) -> None:
    """Refuse an existing path unless --force, and never replace a foreign directory."""
    if not out.exists():
        return
    if not force:
        raise ForensicsError(f"{out}: already exists; pass --force to overwrite it")
    if not (out / "meta.json").is_file() or not out.is_dir():
        raise ForensicsError(f"{out}: exists and is not a token export; choose another path")


def write_export(
    replayer: Any,
    replay: pl.DataFrame,
    out: Path,
    meta: dict[str, Any],
    *,
    force: bool = False,
    progress: bool = False,
) -> dict[str, Any]:
    """Write the export directory for `replay` (window and/or baseline rows). Returns meta."""
    require_megatron(replayer)
    out = Path(out)
    check_export_target(out, force)
    samples, segments = sample_tables(replay)
    length = sample_length(replayer)
    dtype = token_dtype(replayer)
    info = {
        "format": EXPORT_FORMAT,
        "samples": samples.height,
        "seq_length": int(replayer.data.seq_length),
        "sample_length": length,
        "dtype": str(dtype),
        **meta,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        array = np.lib.format.open_memmap(
            tmp / "tokens.npy", mode="w+", dtype=dtype, shape=(samples.height, length)
        )
        gather_tokens(replayer, segments, out=array, progress=progress)
        array.flush()
        del array
        samples.write_parquet(tmp / "samples.parquet")
        segments.write_parquet(tmp / "segments.parquet")
        (tmp / "meta.json").write_text(json.dumps(info, indent=2, default=str) + "\n")
        if out.exists():  # --force over an earlier export (checked above): swap, then remove
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            os.replace(out, old / "x")
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return info


def read_export(path: Path) -> tuple[np.ndarray, pl.DataFrame, pl.DataFrame, dict[str, Any]]:
    """(tokens memmap, samples, segments, meta) of an export directory."""
    path = Path(path)
    meta_file = path / "meta.json"
    if not meta_file.is_file():
        raise ForensicsError(f"{path}: not a token export (no meta.json)")
    meta = json.loads(meta_file.read_text())
    if meta.get("format") != EXPORT_FORMAT:
        raise ForensicsError(f"{path}: unknown export format {meta.get('format')!r}")
    tokens = np.load(path / "tokens.npy", mmap_mode="r", allow_pickle=False)
    return (
        tokens,
        pl.read_parquet(path / "samples.parquet"),
        pl.read_parquet(path / "segments.parquet"),
        meta,
    )
