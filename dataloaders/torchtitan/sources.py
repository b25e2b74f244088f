"""One source of a torchtitan run: its files, their rows (doc_id = the row number over the files
in order, the index of the row in a map-style Dataset of the files), the documents' token ids
as torchtitan encodes them, and a rank's documents epoch by epoch.

The files are read with the Hugging Face family's readers (dataloaders/hf/shards.py, rows.py):
the loader torchtitan's dataset table holds is the same `load_dataset(file_format,
data_files=files, split="train")` (see config.py).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dataloaders.errors import ForensicsError
from dataloaders.hf import doc_rows, rows
from dataloaders.hf import order as hf_order
from dataloaders.hf.shards import infer_format, open_shards, resolve_files, verify_shards
from dataloaders.torchtitan import cache, order
from dataloaders.torchtitan.tokens import TitanTokenizer


class Source:
    """A source's files and documents (`spec` is its TorchtitanSource)."""

    def __init__(self, spec: Any, where: Path | None):
        self.spec = spec
        self.name = spec.name
        files = resolve_files(list(spec.files), config=where)
        if any(isinstance(f, str) for f in files):
            raise ForensicsError(
                f"{where or 'data'}: source {spec.name}: remote files are not replayed for "
                "torchtitan runs yet; give local copies"
            )
        self.builder = infer_format(files, spec.file_format, config=where)
        self.shards = open_shards(files)
        if spec.shards is not None:
            verify_shards(self.shards, spec.shards, config=where)
        if self.builder == "parquet":
            rows.check_parquet_shards(self.shards)

    @cached_property
    def offsets(self) -> np.ndarray:
        """doc_id of each file's row 0, plus the total."""
        counts = [rows.count_rows(s, self.builder) for s in self.shards]
        return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    @property
    def n_docs(self) -> int:
        return int(self.offsets[-1])

    def token_inputs(self, tokenizer: TitanTokenizer) -> np.ndarray:
        """Input tokens each document adds to the buffer: len(encode(text, bos, eos)) - 1
        (text_datasets.py:142), in doc_id order (cached on disk: cache.py)."""
        key = cache.inputs_key(self, tokenizer)
        hit = cache.load_inputs(key, self.n_docs)
        if hit is not None:
            return hit
        parts = []
        for shard in self.shards:
            for texts in rows.iter_texts(shard, self.builder, self.spec.text_field):
                ids = tokenizer.encode_documents([t or "" for t in texts])
                parts.append(np.fromiter((max(len(i) - 1, 0) for i in ids), dtype=np.int64))
        counts = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        if len(counts) != self.n_docs:
            raise ForensicsError(
                f"source {self.name}: its files hold {len(counts)} texts but {self.n_docs} rows"
            )
        cache.save_inputs(key, counts)
        return counts

    def doc_info(self, doc_ids: np.ndarray, *, text: bool) -> pl.DataFrame:
        """doc_id, file, provenance fields (and text) of the given documents (read as the
        Hugging Face family reads its files: dataloaders/hf/doc_rows.py)."""
        return doc_rows.doc_info(
            self.shards,
            self.builder,
            self.offsets,
            doc_ids,
            name=self.name,
            provenance_fields=self.spec.provenance_fields,
            text_field=self.spec.text_field,
            text=text,
        )

    def doc_tokens(self, doc_ids: np.ndarray, tokenizer: TitanTokenizer) -> dict[int, list[int]]:
        """doc_id -> its encoded ids (BOS and EOS as torchtitan adds them)."""
        ids = np.unique(np.asarray(doc_ids, dtype=np.int64))
        info = self.doc_info(ids, text=True)
        encoded = tokenizer.encode_documents([t or "" for t in info["text"].to_list()])
        return dict(zip(info["doc_id"].to_list(), encoded, strict=True))

    @cached_property
    def map_style_index(self) -> Any:
        with hf_order.without_torch():
            return order.map_style_index(self.n_docs)

    @cached_property
    def _streaming_base(self) -> Any:
        with hf_order.without_torch():
            real, _features = hf_order.streaming_source(self.shards, self.builder)
            return hf_order.id_dataset(real, self.shards, hf_order.RowCounter())


class RankOrder:
    """A rank's documents from one source, one epoch at a time (order.py says how)."""

    def __init__(self, source: Source, rank: int, world: int):
        self.source = source
        self.streaming = source.spec.streaming
        self._epochs: dict[int, np.ndarray] = {}
        with hf_order.without_torch():
            if self.streaming:
                self.split: Any = order.StreamingSplit(source._streaming_base, rank, world)
            else:
                split = order.map_style_split(source.map_style_index, rank, world)
                self.split = order.split_ids(split)

    def epoch(self, e: int) -> np.ndarray:
        """doc ids of epoch e, in read order."""
        if e not in self._epochs:
            with hf_order.without_torch():
                if self.streaming:
                    encoded = self.split.order(e)
                    self._epochs[e] = hf_order.to_global_ids(encoded, self.source.offsets)
                else:
                    self._epochs[e] = order.map_style_epoch(self.split, e)
        return self._epochs[e]

    def streaming_position(self, state: dict[str, Any], where: str) -> tuple[int, int]:
        """(epoch, documents of it read) of a saved IterableDataset state_dict."""
        epoch = int(state.get("epoch", 0))
        with hf_order.without_torch():
            encoded = self.split.order(epoch)
            pos = self.split.position_of_state(state, encoded, where)
        return epoch, pos
