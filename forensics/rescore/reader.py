"""What a checkpoint format is to `--checkpoint`: one `CheckpointReader` per kind, in the module
that reads it (`hf`, `megatron`, `olmo_core`), listed once in `forensics.rescore.kinds`.

A reader answers, for a directory the user passed: whether it is its kind (`recognises`, from
the file listing alone), the checks run before any work (`check`: a one-line refusal naming
what is wrong; every pickle the checkpoint holds is gated there by dataloaders.safe_pickle, the
only place torch is imported before the model is loaded), which files make its content
(`content_files`, the cache key), and the model (`load`). `forensics.rescore.checkpoint` asks
the readers in turn and names no kind.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from forensics.errors import ForensicsError


class CheckpointReader(ABC):
    """One kind of checkpoint directory. Subclasses set `kind` and implement `recognises`,
    `check` and `build` (or `load`, when the model comes from another library's loader)."""

    kind: ClassVar[str]

    @abstractmethod
    def recognises(self, path: Path) -> bool:
        """True when the directory's file listing is this kind's."""

    @abstractmethod
    def check(self, path: Path) -> dict[str, Any]:
        """What the checkpoint says about its model, after the checks run before any work (a
        planted global in any of its pickles is refused here)."""

    def content_files(self, path: Path) -> list[Path]:
        """The files whose names and contents make the checkpoint (every file, in rank
        subdirectories too, unless the kind says fewer)."""
        return sorted(p for p in path.rglob("*") if p.is_file())

    def build(self, path: Path, dtype: str) -> Any:
        """The model in `dtype`, on CPU (readers that use `load` as it is)."""
        raise NotImplementedError(f"{type(self).__name__} builds no model")

    def load(self, path: Path, device: str, dtype: str) -> Any:
        """The model, in eval mode on `device`: read on CPU without the framework's process
        group (`build`), then moved."""
        try:
            import torch
        except ImportError:
            raise ForensicsError("rescoring needs torch: pip install 'forensics[embed]'") from None
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ForensicsError(f"--device {device}: no CUDA device is available here")
        return self.build(path, dtype).eval().to(device)
