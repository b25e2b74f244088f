"""The body of `forensics rescore` (the typer function in forensics/commands/rescore.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from dataloaders.atomic import write_parquet_atomic
from dataloaders.console import make_console
from forensics.errors import ForensicsError
from forensics.replay import open_replayer, replay_sides
from forensics.rescore import rescore, rescore_parquet
from forensics.rescore.export import check_export_target, require_megatron, write_export
from forensics.run_source import resolve_run_config
from forensics.safe_text import terminal_safe
from forensics.skip import json_fingerprint
from forensics.window import choose_windows

SHOWN = 10


def run_rescore_command(
    *,
    config: Path | None,
    megatron_args: str | None,
    from_checkpoint: Path | None,
    step: int,
    window: int,
    baseline: str | None,
    out: Path,
    export_tokens: Path | None,
    options: Any,
    force: bool,
    progress: bool,
) -> None:
    """Replay window + baseline, then export their tokens or rescore them."""

    if export_tokens is None and options is None:
        raise ForensicsError("pass --checkpoint DIR, --losses FILE or --export-tokens DIR")
    if export_tokens is not None:
        check_export_target(export_tokens, force)
    else:
        options.check()
        if (out / "rescore.parquet").exists() and not force:
            raise ForensicsError(f"{out / 'rescore.parquet'}: already exists; pass --force")
    run = resolve_run_config(config, megatron_args, from_checkpoint, step)
    replayer = open_replayer(run)
    require_megatron(replayer)
    plan = choose_windows(replayer, run, step, window, baseline, None)
    span, base = plan.window, plan.baseline
    replay = replay_sides(replayer, {"window": span, "baseline": base}, progress)
    fingerprint = json_fingerprint(replayer)

    console = make_console(stderr=True)
    if export_tokens is not None:
        meta = {"step": step, "window": list(span), "baseline": list(base),
                "fingerprint": fingerprint}  # fmt: skip
        info = write_export(replayer, replay, export_tokens, meta, force=force, progress=progress)
        console.print(
            f"{info['samples']:,} samples x {info['sample_length']} tokens (window {span[0]}-"
            f"{span[1]}, baseline {base[0]}-{base[1]}) -> {export_tokens}"
        )
        return

    cache = out / ".cache"
    result = rescore(replayer, replay, options, cache_dir=cache, fingerprint=fingerprint)
    write_parquet_atomic(rescore_parquet(result), out / "rescore.parquet")
    if progress:
        _print_summary(result, console)
    console.print(f"rescore.parquet in {out}/")


def _print_summary(result: Any, console: Any) -> None:
    """Per dataset: mean loss z of its segments; then the top samples (numbers only)."""
    from rich.table import Table

    window = result.samples.filter(pl.col("side") == "window")
    segs = result.segments.join(window.select("row", "loss_z").rename({"loss_z": "sz"}), on="row")
    col = "loss_z" if result.token_level else "sz"
    per = (
        segs.group_by("dataset")
        .agg(pl.col(col).mean().alias("z"), pl.len().alias("n"))
        .sort("z", descending=True, nulls_last=True)
    )
    table = Table(title=f"Loss z by dataset ({result.info.get('source')})")
    for name in ("dataset", "segments", "mean loss z"):
        table.add_column(name)
    for r in per.iter_rows(named=True):
        z = "n/a" if r["z"] is None else f"{r['z']:+.2f}"
        table.add_row(terminal_safe(r["dataset"], 40), f"{r['n']:,}", z)
    console.print(table)
    top = window.sort("loss_z", descending=True, nulls_last=True).head(SHOWN)
    for r in top.iter_rows(named=True):
        console.print(
            f"iteration {r['iteration']} position {r['position']}: loss {r['loss']:.3f} "
            f"(z {r['loss_z']:+.2f})"
        )
