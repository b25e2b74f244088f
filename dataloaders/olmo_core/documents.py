"""The documents of an OLMo-core run: their text, token file and Dolma metadata, the documents
of a whole file or source, and the tokens of any dataset instance (with the instance filter's
verdict on it). `OlmoCoreReplayer` has these methods; they need its token files (`files`), data
config (`data`), run config (`config`) and its `_locate` / `_place` / `_doc_ids` /
`_meta_fields`, which say where a document or an instance lives.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np
import polars as pl

from dataloaders.errors import ForensicsError
from dataloaders.olmo_core import files
from dataloaders.olmo_core.repetition import masked_instances
from dataloaders.progress import progress_bar as _progress
from dataloaders.token_bytes import decode_arrays
from dataloaders.tokenizer import load_tokenizer

FILE_FACET = "file"


class OlmoCoreDocuments:
    """Text, metadata and instance tokens of an OLMo-core run's documents (a part of the
    replayer, see the module docstring)."""

    files: list[files.TokenFile]
    data: Any
    config: Any
    _where: str

    def instance_mask(
        self, instances: np.ndarray, stages: np.ndarray | None = None, block: int = 256
    ) -> np.ndarray:
        """True where OLMo-core's instance filter masked the instance out of the loss."""
        flt = self.data.instance_filter
        assert flt is not None
        fidx, local = self._place(instances, stages)
        out = np.zeros(len(fidx), dtype=bool)
        for lo in range(0, len(fidx), block):
            tokens = np.stack(
                [
                    self._instance_tokens(int(k), int(i))
                    for k, i in zip(fidx[lo : lo + block], local[lo : lo + block], strict=True)
                ]
            )
            out[lo : lo + block] = masked_instances(
                tokens,
                max_period=flt.repetition_max_period,
                min_period=flt.repetition_min_period,
                max_count=flt.repetition_max_count,
            )
        return out

    def _instance_tokens(self, file_idx: int, local: int) -> np.ndarray:
        """The tokens of instance `local` of file `file_idx`."""
        start = local * self.data.sequence_length
        return files.read_tokens(
            self.files[file_idx], start, start + self.data.sequence_length, self.data
        )

    def instance_tokens(self, instance: int, stage: int = 0) -> np.ndarray:
        """The tokens of a dataset instance (what OLMo-core's dataset[instance] returns)."""
        fidx, local = self._place(np.asarray([instance]), np.asarray([stage]))
        return self._instance_tokens(int(fidx[0]), int(local[0]))

    def document_tokens(self, docs: pl.DataFrame) -> list[np.ndarray]:
        """Token ids of whole documents (`docs`: dataset, doc_id), in the table's order: each
        document's span of its token file (`_doc_span`)."""
        out: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * docs.height
        table = docs.select("dataset", pl.col("doc_id").cast(pl.Int64)).with_row_index("_i")
        for (name,), part in table.group_by(["dataset"], maintain_order=True):
            fidx, doc = self._locate(str(name), part["doc_id"].to_numpy())  # type: ignore[attr-defined]
            for i, k, d in zip(part["_i"].to_list(), fidx.tolist(), doc.tolist(), strict=True):
                start, end = self._doc_span(k, d)
                out[i] = files.read_tokens(self.files[k], start, end, self.data)
        return out

    def _meta_columns(self, file_idx: np.ndarray, doc: np.ndarray) -> dict[str, list[str | None]]:
        names = self._meta_fields
        out: dict[str, list[str | None]] = {n: [None] * len(doc) for n in names}
        if not names:
            return out
        for k in np.unique(file_idx):
            sel = np.flatnonzero(file_idx == k)
            got = files.metadata_fields(self.files[int(k)], doc[sel], names)
            for n in names:
                column = out[n]
                for i, v in zip(sel.tolist(), got[n], strict=True):
                    column[i] = v
        return out

    @cached_property
    def _tokenizer(self) -> Any:
        if self.config.tokenizer is None:
            raise ForensicsError(
                f"{self._where}decoding text needs the run's tokenizer (tokenizer:)"
            )
        return load_tokenizer(self.config.tokenizer, self.config.tokenizer_merges)

    def _doc_span(self, file_idx: int, doc: int) -> tuple[int, int]:
        """(start, end) tokens of a document within its file."""
        ends = files.document_ends(self.files[file_idx], self.data)
        return (int(ends[doc - 1]) if doc > 0 else 0), int(ends[doc])

    def _decode(self, seg: dict[str, np.ndarray]) -> list[str]:
        """Text of document pieces (file, doc, token_start, token_end within the document)."""
        ids = []
        keys = ("file", "doc", "token_start", "token_end")
        for k, d, a, b in zip(*(seg[key].tolist() for key in keys), strict=True):
            start, _ = self._doc_span(k, d)
            ids.append(files.read_tokens(self.files[k], start + a, start + b, self.data))
        return decode_arrays(self._tokenizer, ids) if ids else []

    def documents_by_facet(self, facet: str, key: str | None) -> pl.DataFrame | None:
        """A whole token file (facet "file") or a whole source ("dataset"), from the files'
        document boundaries; metadata fields would mean reading every file's metadata: None."""
        if facet == "dataset":
            chosen = [i for i, f in enumerate(self.files) if f.source == key]
        elif facet == FILE_FACET:
            chosen = [i for i, f in enumerate(self.files) if str(f.path) == key]
        else:
            return None
        frames = []
        for i in chosen:
            n = len(files.document_ends(self.files[i], self.data))
            ids = self._doc_ids(np.full(n, i, dtype=np.int64), np.arange(n, dtype=np.int64))
            frames.append(pl.DataFrame({"dataset": self.files[i].source, "doc_id": ids}))
        if not frames:
            return pl.DataFrame(schema={"dataset": pl.Utf8, "doc_id": pl.Int64})
        return pl.concat(frames).cast({"doc_id": pl.Int64})

    def documents(self, docs: pl.DataFrame, *, progress: bool = True) -> pl.DataFrame:
        base = docs.select("dataset", pl.col("doc_id").cast(pl.Int64)).unique(maintain_order=True)
        frames = []
        with _progress(progress, base.height, "decoding documents") as advance:
            for (name,), part in base.group_by(["dataset"], maintain_order=True):
                ids = part["doc_id"].to_numpy()
                fidx, doc = self._locate(str(name), ids)
                spans = np.asarray(
                    [self._doc_span(int(k), int(d)) for k, d in zip(fidx, doc, strict=True)],
                    dtype=np.int64,
                ).reshape(-1, 2)
                seg = {
                    "file": fidx,
                    "doc": doc,
                    "token_start": np.zeros(len(ids), dtype=np.int64),
                    "token_end": spans[:, 1] - spans[:, 0],
                }
                frame = part.with_columns(
                    pl.Series("text", self._decode(seg), dtype=pl.Utf8),
                    pl.Series(FILE_FACET, [str(self.files[int(k)].path) for k in fidx], pl.Utf8),
                )
                for n, values in self._meta_columns(fidx, doc).items():
                    frame = frame.with_columns(pl.Series(n, values, dtype=pl.Utf8))
                frames.append(frame)
                advance(part.height)
        if not frames:
            schema = {"dataset": pl.Utf8, "doc_id": pl.Int64, "text": pl.Utf8}
            return pl.DataFrame(schema=schema | {c: pl.Utf8 for c in self.facets})
        return pl.concat(frames, how="diagonal_relaxed")
