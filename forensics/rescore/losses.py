"""`--losses FILE`: per-sample or per-token losses a team computed on its own cluster.

Accepted files:
- Parquet with `iteration`, `position` and either `token_losses` (a list of seq_length floats:
  loss of token t+1 given tokens 0..t, as `forensics.rescore.checkpoint.token_losses` computes) or
  `loss` (the sample's mean token loss); optional `max_token_loss` and `grad_norm`.
- `.npy` inside (or beside) a token export directory (`forensics replay --tokens` /
  `forensics rescore --export-tokens`): shape [n] (per sample) or [n, seq_length] (per token),
  row-aligned with the export's samples.parquet.

Every row must be a sample of the window or of the baseline (matched by iteration and position in
the global batch); both sides need rows. Anything else is a one-line error: numbers for another
window would otherwise be z-scored silently.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from forensics.errors import ForensicsError


@dataclass
class LoadedLosses:
    rows: np.ndarray  # the rows of the replay's sample table these losses belong to, sorted
    token_losses: np.ndarray | None  # [len(rows), L] when per token
    sample_columns: dict[str, np.ndarray]  # loss / max_token_loss / grad_norm when per sample
    digest: str


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def _from_npy(path: Path) -> pl.DataFrame:
    index = path.parent / "samples.parquet"
    if not index.is_file():
        raise ForensicsError(
            f"{path}: a .npy losses file must sit in a token export directory (no "
            f"{index.name} beside it to say which sample each row is)"
        )
    try:  # numbers only: an object array (a pickle) is refused, never unpickled
        array = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ForensicsError(f"{path}: not a numeric .npy array ({first})") from None
    keys = pl.read_parquet(index).sort("row").select("iteration", "position")
    if array.shape[0] != keys.height or array.ndim not in (1, 2):
        raise ForensicsError(
            f"{path}: shape {array.shape} does not match the export's {keys.height} samples "
            "(expected [n] or [n, seq_length])"
        )
    if array.ndim == 1:
        return keys.with_columns(pl.Series("loss", array.astype(np.float64)))
    return keys.with_columns(pl.Series("token_losses", list(array.astype(np.float32))))


def read_losses(path: Path, samples: pl.DataFrame, n_tokens: int) -> LoadedLosses:
    """Match a losses file to the replay's samples (row, iteration, position, side)."""
    if not path.is_file():
        raise ForensicsError(f"{path}: losses file not found")
    if path.suffix == ".npy":
        table = _from_npy(path)
    else:
        try:
            table = pl.read_parquet(path)
        except Exception as err:  # polars raises several types for a non-Parquet file
            raise ForensicsError(f"{path}: not a readable Parquet losses file ({err})") from None
    for col in ("iteration", "position"):
        if col not in table.columns:
            raise ForensicsError(f"{path}: no {col!r} column (need iteration, position, loss)")
    if "token_losses" not in table.columns and "loss" not in table.columns:
        raise ForensicsError(f"{path}: needs a 'loss' (per sample) or 'token_losses' column")
    if table.select("iteration", "position").is_duplicated().any():
        raise ForensicsError(f"{path}: a sample (iteration, position) appears twice")
    keyed = table.with_columns(
        pl.col("iteration").cast(pl.Int64), pl.col("position").cast(pl.Int32)
    )
    matched = keyed.join(
        samples.select("row", "iteration", "position", "side"),
        on=["iteration", "position"],
        how="left",
    )
    stray = matched.filter(pl.col("row").is_null())
    if stray.height:
        it, pos = stray.row(0, named=True)["iteration"], stray.row(0, named=True)["position"]
        win = samples.filter(pl.col("side") == "window")["iteration"]
        base = samples.filter(pl.col("side") == "baseline")["iteration"]
        raise ForensicsError(
            f"{path}: {stray.height} rows are not samples of this window "
            f"({win.min()}-{win.max()}) or its baseline ({base.min()}-{base.max()}), e.g. "
            f"iteration {it} position {pos}; were the losses computed for another window?"
        )
    for side in ("window", "baseline"):
        if matched.filter(pl.col("side") == side).height == 0:
            raise ForensicsError(
                f"{path}: no losses for {side} samples; export and score both sides "
                "(forensics rescore --export-tokens DIR)"
            )
    matched = matched.sort("row")
    rows = matched["row"].to_numpy().astype(np.int64)
    if "token_losses" in matched.columns:
        lengths = matched["token_losses"].list.len()
        bad = matched.filter(lengths != n_tokens)
        if bad.height:
            r = bad.row(0, named=True)
            raise ForensicsError(
                f"{path}: iteration {r['iteration']} position {r['position']} has "
                f"{len(r['token_losses'])} token losses, the run's samples have {n_tokens} "
                "(seq_length)"
            )
        losses = np.asarray(matched["token_losses"].to_list(), dtype=np.float32)
        if not np.isfinite(losses).all():
            raise ForensicsError(f"{path}: token losses hold NaN or infinity")
        return LoadedLosses(rows, losses, {}, _digest(path))
    columns = {
        c: matched[c].cast(pl.Float64).to_numpy()
        for c in ("loss", "max_token_loss", "grad_norm")
        if c in matched.columns
    }
    if not np.isfinite(columns["loss"]).all():
        raise ForensicsError(f"{path}: losses hold NaN, null or infinity")
    return LoadedLosses(rows, None, columns, _digest(path))
