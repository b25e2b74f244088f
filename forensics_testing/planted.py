"""Checkpoints with planted code: a file the library wrote, with one object added whose unpickling
would run a shell command creating a marker file. A reader that runs it leaves the marker.

Each helper reads the file the library wrote (trusted here: the test's own output), adds the
object, and writes it back with the writer the library uses (`torch.save` for
`model_optim_rng.pt` / `common.pt`; `pickle.dump` for a torch.distributed.checkpoint
`.metadata`, as torch 2.13 torch/distributed/checkpoint/filesystem.py:774 and ai2-olmo-core
3.0.0 olmo_core/distributed/checkpoint/filesystem.py:309 write it), so the file is otherwise what
the library wrote.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import shlex
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

OLMO_FILESYSTEM = "olmo_core.distributed.checkpoint.filesystem"


class Payload:
    """Unpickled, it runs `touch MARKER` (os.system): any code at all, as far as a reader is
    concerned."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


def plant_in_torch_save(path: Path, marker: Path, where: tuple[str, ...]) -> None:
    """Add the payload at `state[where[0]][where[1]]...` of a torch.save'd dict."""
    import torch

    state = torch.load(path, map_location="cpu", weights_only=False)
    node = state
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = Payload(marker)
    torch.save(state, path)


@contextlib.contextmanager
def _olmo_core_names() -> Iterator[None]:
    """OLMo-core's `_StorageInfo` importable under its own name (olmo_core is not installed
    here), with its fields (ai2-olmo-core 3.0.0 olmo_core/distributed/checkpoint/filesystem.py:
    56-62), so a `.metadata` OLMo-core wrote round-trips with its class names unchanged."""

    @dataclasses.dataclass
    class _StorageInfo:
        relative_path: str
        offset: int
        length: int

    _StorageInfo.__module__ = OLMO_FILESYSTEM
    _StorageInfo.__qualname__ = "_StorageInfo"
    parts = OLMO_FILESYSTEM.split(".")
    names = [".".join(parts[: i + 1]) for i in range(len(parts))]
    added = [n for n in names if n not in sys.modules]
    for name in added:
        sys.modules[name] = types.ModuleType(name)
    sys.modules[OLMO_FILESYSTEM]._StorageInfo = _StorageInfo  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for name in added:
            sys.modules.pop(name, None)


def plant_in_dcp_metadata(path: Path, marker: Path) -> None:
    """Add the payload as one more attribute of the Metadata object in a `.metadata` (as
    megatron-core adds `all_local_plans`: dist_checkpointing/strategies/state_dict_saver.py:144)."""
    import torch.distributed.checkpoint  # noqa: F401 - the classes the file names

    with _olmo_core_names():
        with open(path, "rb") as stream:
            metadata = pickle.load(stream)  # noqa: S301 - the library's own output, trusted
        metadata.__dict__["extra"] = Payload(marker)
        with open(path, "wb") as stream:
            pickle.dump(metadata, stream)
