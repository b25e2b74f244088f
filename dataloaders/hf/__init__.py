"""Replay of Hugging Face `datasets` pipelines (map-style and streaming) over local files.

`open_hf_replayer(config)` returns a Replayer (dataloaders/base.py) for a RunConfig whose data has
`format: hf`; `record_shards(files)` gives the `data.shards` entries (size, sha256) to store in the
config when the run starts, so a later replay can refuse changed files.
"""

from __future__ import annotations

from typing import Any

from dataloaders.hf.replayer import HFReplayer
from dataloaders.hf.shards import record_shards

__all__ = ["open_hf_replayer", "record_shards"]


def open_hf_replayer(config: Any) -> Any:
    """The Replayer of a `format: hf` run config (validates files and fields up front)."""
    return HFReplayer(config)
