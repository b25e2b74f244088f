"""Checkpoint discovery: which iterations a Megatron-style checkpoint directory holds.

Megatron saves the state after iteration C as the subdirectory `iter_{C:07d}` of `--save`; the
run config's `checkpoint_dir` and `forensics triage --checkpoints DIR` both name such a directory.
"""

from __future__ import annotations

import re
from pathlib import Path

_ITER_DIR = re.compile(r"iter_(\d+)")


def megatron_folder(iteration: int) -> str:
    """The name of the folder Megatron saves the state after `iteration` in."""
    return f"iter_{iteration:07d}"


def checkpoint_iterations(folder: Path) -> list[int]:
    """The iterations of the `iter_NNNNNNN` subdirectories of `folder`, sorted ([] when none)."""
    found = []
    for entry in folder.iterdir():
        match = _ITER_DIR.fullmatch(entry.name)
        if match and entry.is_dir():
            found.append(int(match.group(1)))
    return sorted(found)
