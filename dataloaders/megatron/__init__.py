"""Megatron-core data: .bin/.idx files, GPT/Blended index arrays, and the exact replay."""

from dataloaders.megatron.indexed import IndexedDataset, IndexedDatasetWriter, write_indexed_dataset
from dataloaders.megatron.replayer import MegatronReplayer, open_megatron_replayer

__all__ = [
    "IndexedDataset",
    "IndexedDatasetWriter",
    "MegatronReplayer",
    "open_megatron_replayer",
    "write_indexed_dataset",
]
