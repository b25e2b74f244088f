"""The checkpoint kinds `--checkpoint` reads: one reader each, in the module that reads it,
listed once here.

`reader_of` asks the readers in `_RECOGNITION` order and takes the first that recognises the
directory: a Hugging Face directory (config.json, no OLMo-core model_and_optim/ beside it)
first, then OLMo-core's stepN/ (which holds a config.json too), then Megatron's iteration
directories; a directory none recognises is read as Hugging Face's, whose checks then say what
is missing. Adding a kind is its reader (`forensics.rescore.reader.CheckpointReader`) and its
place in `_RECOGNITION`.
"""

from __future__ import annotations

from pathlib import Path

from forensics.rescore.hf import HFCheckpoint
from forensics.rescore.megatron import MegatronCheckpoint
from forensics.rescore.olmo_core import OlmoCoreCheckpoint
from forensics.rescore.reader import CheckpointReader

_FALLBACK = HFCheckpoint()
_RECOGNITION: tuple[CheckpointReader, ...] = (_FALLBACK, OlmoCoreCheckpoint(), MegatronCheckpoint())
REGISTRY: dict[str, CheckpointReader] = {r.kind: r for r in _RECOGNITION}
KINDS: tuple[str, ...] = tuple(REGISTRY)


def reader_of(path: Path) -> CheckpointReader:
    """The reader of the checkpoint directory `path`, from its file listing alone."""
    return next((r for r in _RECOGNITION if r.recognises(path)), _FALLBACK)


__all__ = ["KINDS", "REGISTRY", "CheckpointReader", "reader_of"]
