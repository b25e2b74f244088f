"""Replay of MosaicML streaming runs: StreamingDataset over local MDS streams, iterated by a torch
DataLoader on every rank (mosaicml-streaming 0.13.0's order, transcribed; no torch needed).

`open_mosaic_replayer(config)` returns a Replayer (dataloaders/base.py) for a RunConfig whose data
has `format: mosaic-streaming`.
"""

from __future__ import annotations

from typing import Any

from dataloaders.mosaic.replayer import MosaicReplayer

__all__ = ["open_mosaic_replayer"]


def open_mosaic_replayer(config: Any) -> Any:
    """The Replayer of a `format: mosaic-streaming` run config (checks shards up front)."""
    return MosaicReplayer(config)
