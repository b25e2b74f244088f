"""Open the right replayer for a run config, and replay iteration ranges with it.

`open_replayer` asks the run's loader family (`dataloaders.families`) to open it; each family
imports its package only when used, so a Megatron replay never imports `datasets` and vice versa.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataloaders.families import family_of
from dataloaders.run_config import RunConfig
from forensics.inputs_guard import check_run_inputs

if TYPE_CHECKING:
    import polars as pl

    from dataloaders.base import Replayer


def open_replayer(config: RunConfig) -> Replayer:
    """The Replayer for this run: its family's (`dataloaders.families`). Every file the config
    names is checked first: a FIFO or device there is refused, never opened."""
    check_run_inputs(config)
    return family_of(config).open(config)


_OPENED: dict[str, Replayer] = {}  # one replayer per run config per worker process


def cached_replayer(config: RunConfig) -> Replayer:
    """`open_replayer`, once per config per process: an engine's worker handles many parts of
    one run, and opening (index validation, the shuffle) is the expensive part."""
    key = config.config_hash()
    if key not in _OPENED:
        _OPENED[key] = open_replayer(config)
    return _OPENED[key]


def replay_sides(
    replayer: Replayer, sides: dict[str, tuple[int, int]], progress: bool
) -> pl.DataFrame:
    """The replay tables of several iteration ranges, stacked, with a `side` column naming the
    range each row came from ("window", "baseline"): what spike and rescore compare."""
    import polars as pl

    parts = [
        replayer.replay(a, b, text=False, progress=progress).with_columns(
            pl.lit(side).alias("side")
        )
        for side, (a, b) in sides.items()
    ]
    return pl.concat(parts, how="diagonal_relaxed")
