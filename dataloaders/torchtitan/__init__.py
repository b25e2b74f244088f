"""Replay of torchtitan 0.3.0's text dataloaders (`format: torchtitan`): HuggingFaceTextDataLoader
and InterleavedHuggingFaceTextDataLoader over local files, map-style or streaming, split over DP
ranks, re-looped, and resumed from the loader state torchtitan saves in its DCP checkpoints.

`open_titan_replayer(config)` returns the Replayer (dataloaders/base.py); for the save-folder
hooks, `recognises_save(folder)` says whether a folder is a torchtitan save with a loader state
`saved_loader_state(folder, step)` reads every DP rank's, and `resume_entry(folder, step)` gives
the `data.resumes` entry of a restart from it.

main's Grain pipeline (pytorch/torchtitan PR #4088, grain 0.2.18) is in no release: torchtitan
0.3.0 is the newest on PyPI and ships these loaders, so that pipeline is refused (config.py).
"""

from __future__ import annotations

from typing import Any

from dataloaders.torchtitan.replayer import TitanReplayer
from dataloaders.torchtitan.state import recognises_save, resume_entry, saved_loader_state

__all__ = ["open_titan_replayer", "recognises_save", "resume_entry", "saved_loader_state"]


def open_titan_replayer(config: Any) -> Any:
    """The Replayer of a `format: torchtitan` run config (files and fields checked up front)."""
    return TitanReplayer(config)
