"""Replay of OLMo-core runs: NumpyFSLDataset token files read by NumpyFSLDataLoader.

`open_olmo_core_replayer(config)` returns a Replayer (dataloaders/base.py) for a RunConfig whose
data has `format: olmo-core`. order.py is the data loader's order, files.py the token files and
documents, repetition.py the instance filter.
"""

from __future__ import annotations

from typing import Any

from dataloaders.olmo_core.replayer import OlmoCoreReplayer

__all__ = ["open_olmo_core_replayer"]


def open_olmo_core_replayer(config: Any) -> Any:
    """The Replayer of a `format: olmo-core` run config (validates files and states up front)."""
    return OlmoCoreReplayer(config)
