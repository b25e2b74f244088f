"""The Replayer for Hugging Face `datasets` runs (see dataloaders/base.py for the contract).

The whole run's order is built once, on first use, as two tables:

    steps     one row per (iteration, position): which sample the run consumed there
              iteration Int64, position Int32 (rank * per_device_batch_size + j),
              sample Int64 (unpacked: the doc_id; packed: epoch << 32 | sequence number),
              dataset_sample Int64 (unpacked: doc_id; packed: the sequence number in its epoch),
              exact Boolean (False from an unrecorded streaming resume on)
    segments  packed runs only: sample -> doc_id, token_start, token_end (one row per document
              piece in the sequence, in sequence order)

Global batch convention: iteration i takes the i-th DataLoader batch of every rank (each rank
iterates its own split_dataset_by_node copy, epochs back to back) and rank r's j-th example sits at
position r * per_device_batch_size + j; sample_index = (i - 1) * global_batch_size + position.
A short last batch (drop_last false) leaves positions empty, so samples per iteration are counted,
not assumed.

doc_id is the dataset-wide row number: rows of the files in config order, each file's rows in the
order datasets' reader yields them (= the index of the row in a map-style Dataset of the files).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dataloaders.base import (
    REPLAY_KEY_COLUMNS,
    Replayer,
    check_iterations,
    exposure_counts,
    fixed_batch_samples,
)
from dataloaders.console import make_console
from dataloaders.errors import ForensicsError
from dataloaders.hf import cache, doc_rows, order, packing, rows
from dataloaders.hf.doc_rows import FILE_FACET
from dataloaders.hf.remote import local_copy
from dataloaders.hf.shards import (
    infer_format,
    open_shards,
    resolve_files,
    save_to_disk_files,
    sha256_file,
    verify_shards,
)
from dataloaders.schedule import Schedule
from dataloaders.tokenizer import load_tokenizer


class HFReplayer(Replayer):
    """Replays a `datasets` pipeline (map-style or streaming) from a RunConfig with format hf."""

    def __init__(self, config: Any):
        self.config = config
        self.data = config.data
        self.source = config.source
        where = f"{self.source}: " if self.source else ""
        self._where = where
        data = self.data
        if data.streaming:
            installed = order._datasets().__version__
            if installed != data.datasets_version:
                raise ForensicsError(
                    f"{where}the run used datasets {data.datasets_version}, this is "
                    f"{installed}: streaming order differs between versions; install "
                    f"datasets=={data.datasets_version} to replay it"
                )
        urls: dict[Path, str] = {}
        if data.files is not None:
            files = resolve_files(list(data.files), config=self.source)
            if any(isinstance(f, str) for f in files):
                for url in (f for f in files if isinstance(f, str)):
                    urls[local_copy(url, data.storage_options)] = url
                local = {u: p for p, u in urls.items()}
                files = [local[f] if isinstance(f, str) else f for f in files]
        else:
            files = save_to_disk_files(data.path, config=self.source)
        self.builder = infer_format(
            files,  # a local copy keeps its object's file name
            data.file_format if data.path is None else "arrow",
            config=self.source,
        )
        self.shards = open_shards(files, urls)
        if data.shards is not None:
            verify_shards(self.shards, data.shards, config=self.source)
        if self.builder == "parquet":
            rows.check_parquet_shards(self.shards)
        with order.without_torch():
            self._real, features = order.streaming_source(self.shards, self.builder)
        columns = list(features) if features is not None else None
        for name, field in [("text_field", data.text_field)] + [
            ("provenance_fields", f) for f in data.provenance_fields
        ]:
            if columns is not None and field not in columns:
                raise ForensicsError(
                    f"{where}data.{name}: {field!r} is not a column of {self.shards[0].path} "
                    f"(columns: {columns})"
                )
        self.gbs = data.global_batch_size

    @cached_property
    def schedule(self) -> Schedule:
        """The schedule of the training section (one data stage; restarts are data.resumes),
        built when a skip plan asks."""
        return Schedule(self.config.training)

    # ------------------------------------------------------------------ the plan

    @cached_property
    def _tokenizer(self) -> Any:
        path = self.config.tokenizer
        tok = load_tokenizer(path, self.config.tokenizer_merges)
        if not hasattr(tok, "encode_batch"):  # Megatron's SentencePiece / tiktoken decoders
            raise ForensicsError(
                f"{path}: a Hugging Face datasets run packs text with a tokenizers tokenizer.json "
                "(or GPT-2 vocab.json); give the one the run used"
            )
        if self.data.eos_token is not None and tok.token_to_id(self.data.eos_token) is None:
            raise ForensicsError(f"{path}: no token {self.data.eos_token!r} (data.eos_token)")
        return tok

    def _row_counts(self, known: dict[int, int] | None = None) -> np.ndarray:
        counts = []
        for shard in self.shards:
            if known is not None and shard.index in known:
                counts.append(known[shard.index])
            else:
                counts.append(rows.count_rows(shard, self.builder))
        return np.asarray(counts, dtype=np.int64)

    @cached_property
    def _offsets(self) -> np.ndarray:
        """Global doc id of each shard's row 0 (plus the total at the end)."""
        if "_stream_counts" in self.__dict__:
            counts = self.__dict__["_stream_counts"]
        else:
            counts = self._row_counts()
        return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    @cached_property
    def _plan(self) -> tuple[pl.DataFrame, pl.DataFrame | None]:
        key = cache.plan_key(self.config, self.shards, order._datasets().__version__)
        hit = cache.load_plan(key)
        if hit is not None:
            steps, segments, offsets = hit
            self.__dict__["_offsets"] = offsets
            return steps, segments
        steps, segments = self._build_plan()
        cache.save_plan(key, steps, segments, self._offsets)
        return steps, segments

    def _build_plan(self) -> tuple[pl.DataFrame, pl.DataFrame | None]:
        from rich.progress import Progress

        console = make_console(stderr=True)
        total = self.data.epochs * (self.data.world_size if self.data.streaming else 1)
        with (
            order.without_torch(),
            Progress(console=console, transient=True, disable=not console.is_terminal) as bar,
        ):
            task = bar.add_task(f"order of {self.data.name} (rank x epoch)", total=total)
            self._tick = lambda: bar.advance(task)
            try:
                if self.data.streaming:
                    return self._streaming_plan(), None
                return self._map_style_plan()
            except ForensicsError:
                raise
            except Exception:
                named = rows.first_unreadable(self.shards, self.builder)  # the file, by name
                if named is not None:
                    raise named from None
                raise

    def _limit(self) -> int:
        return self.config.training.iterations(self.gbs)

    def _resume_points(self) -> tuple[list[int], int | None]:
        """(iterations resumed from a state_dict that we replay, first best-effort iteration)."""
        replayed: list[int] = []
        inexact: int | None = None
        for resume in self.data.resumes:
            if resume.mode == "skip_batches" or not self.data.streaming:
                continue
            if resume.mode == "state_dict" and self.data.num_workers == 0:
                replayed.append(resume.iteration)
            elif inexact is None:
                inexact = resume.iteration
        return replayed, inexact

    def _streaming_plan(self) -> pl.DataFrame:
        data = self.data
        counter = order.RowCounter()
        base = order.id_dataset(self._real, self.shards, counter)
        replayed, inexact = self._resume_points()
        per_rank: list[list[np.ndarray]] = []
        for rank in range(data.world_size):
            ds = order.pipeline(base, data, rank)
            batches: list[np.ndarray] = []
            for epoch in range(data.epochs):
                local = [k - 1 - len(batches) for k in replayed if k - 1 - len(batches) > 0]
                batches.extend(order.epoch_batches(ds, data, epoch, resume_after=local))
                self._tick()
            per_rank.append(batches)
        known = {i: counter.rows[i] for i in counter.complete}
        self.__dict__["_stream_counts"] = self._row_counts(known)
        n_iters = min(self._limit(), min(len(b) for b in per_rank))
        steps = self._steps_frame(
            per_rank, n_iters, lambda b: order.to_global_ids(b, self._offsets)
        )
        steps = steps.with_columns(pl.col("sample").alias("dataset_sample"))
        exact = pl.lit(True) if inexact is None else pl.col("iteration") < inexact
        return steps.with_columns(exact.alias("exact"))

    def _map_style_plan(self) -> tuple[pl.DataFrame, pl.DataFrame | None]:
        data = self.data
        n_rows = int(self._offsets[-1])
        lengths = self._all_token_lengths() if data.pack_tokens is not None else None
        per_rank: list[list[np.ndarray]] = [[] for _ in range(data.world_size)]
        seg_frames = []
        for epoch in range(data.epochs):
            docs = order.map_style_order(n_rows, data, epoch)
            if lengths is None:
                samples = docs
            else:
                segs = packing.pack(docs, lengths[docs], data.pack_tokens, data.pack_group_size)
                n_seq = int(segs["seq"].max()) + 1 if len(segs) else 0
                seg_frames.append(
                    segs.with_columns(
                        (pl.col("seq") + (epoch << 32)).alias("sample"),
                        pl.col("seq").alias("dataset_sample"),
                    ).drop("seq")
                )
                samples = (np.int64(epoch) << 32) | np.arange(n_seq, dtype=np.int64)
            for rank in range(data.world_size):
                batches = order.map_style_rank_batches(len(samples), data, rank)
                per_rank[rank].extend(samples[b] for b in batches)
            self._tick()
        n_iters = min(self._limit(), min(len(b) for b in per_rank))
        steps = self._steps_frame(per_rank, n_iters, lambda b: b)
        if lengths is None:
            steps = steps.with_columns(pl.col("sample").alias("dataset_sample"))
            return steps.with_columns(pl.lit(True).alias("exact")), None
        segments = pl.concat(seg_frames) if seg_frames else None
        ds_sample = pl.col("sample") % (1 << 32)
        steps = steps.with_columns(ds_sample.alias("dataset_sample"), pl.lit(True).alias("exact"))
        return steps, segments

    def _steps_frame(self, per_rank: list[list[np.ndarray]], n_iters: int, to_ids: Any) -> Any:
        """(iteration, position, sample) rows for the first n_iters batches of every rank."""
        size = self.data.per_device_batch_size
        iters, pos, samples = [], [], []
        for rank, batches in enumerate(per_rank):
            for i, batch in enumerate(batches[:n_iters]):
                iters.append(np.full(len(batch), i + 1, dtype=np.int64))
                pos.append(rank * size + np.arange(len(batch), dtype=np.int32))
                samples.append(to_ids(batch))
        if not iters:
            empty = np.zeros(0, dtype=np.int64)
            iters, pos, samples = [empty], [empty.astype(np.int32)], [empty]
        frame = pl.DataFrame(
            {
                "iteration": np.concatenate(iters),
                "position": np.concatenate(pos).astype(np.int32),
                "sample": np.concatenate(samples).astype(np.int64),
            }
        )
        return frame.sort("iteration", "position")

    def _all_token_lengths(self) -> np.ndarray:
        """Token count (+ EOS) of every document, in doc_id order."""
        eos = self.data.eos_token is not None
        parts = []
        for shard in self.shards:
            for texts in rows.iter_texts(shard, self.builder, self.data.text_field):
                parts.append(packing.token_lengths(texts, self._tokenizer, eos))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    # ------------------------------------------------------------------ the protocol

    @property
    def last_iteration(self) -> int:
        steps, _ = self._plan
        return int(steps["iteration"].max() or 0)

    @property
    def facets(self) -> list[str]:
        return [FILE_FACET] + [f for f in self.data.provenance_fields if f != FILE_FACET]

    def iteration_samples(self, first: int, last: int) -> pl.DataFrame:
        return fixed_batch_samples(first, last, self.gbs, self.last_iteration, self._where)

    def replay(
        self, first: int, last: int, *, text: bool = False, progress: bool = True
    ) -> pl.DataFrame:
        check_iterations(first, last, self.last_iteration, self._where)
        steps, segments = self._plan
        window = steps.filter(pl.col("iteration").is_between(first, last))
        if segments is None:
            table = window.with_columns(
                pl.col("sample").alias("doc_id"),
                pl.lit(0, pl.Int64).alias("token_start"),
                pl.lit(None, pl.Int64).alias("token_end"),  # whole document
            )
        else:
            table = window.join(
                segments.drop("dataset_sample"), on="sample", how="left", maintain_order="left"
            )
        table = table.with_columns(
            ((pl.col("iteration") - 1) * self.gbs + pl.col("position")).alias("sample_index"),
            pl.lit(0, pl.Int32).alias("stage"),
            pl.lit(self.data.name).alias("dataset"),
        )
        docs = table.select("doc_id").unique()
        info = self._doc_info(docs["doc_id"].to_numpy(), text=text and segments is None)
        table = table.join(info, on="doc_id", how="left", maintain_order="left")
        if text and segments is not None:
            table = table.with_columns(pl.Series("text", self._segment_texts(table)))
        columns = [
            *REPLAY_KEY_COLUMNS,
            *self.facets,
            *(["text"] if text else []),
            "exact",
        ]
        return table.select(columns).cast(
            {"iteration": pl.Int64, "position": pl.Int32, "dataset_sample": pl.Int64}
        )

    def _doc_info(self, doc_ids: np.ndarray, *, text: bool) -> pl.DataFrame:
        """doc_id, file, provenance fields (and text) for the given documents (doc_rows.py)."""
        return doc_rows.doc_info(
            self.shards,
            self.builder,
            self._offsets,
            doc_ids,
            name=self.data.name,
            provenance_fields=self.data.provenance_fields,
            text_field=self.data.text_field,
            text=text,
        )

    def _segment_texts(self, table: pl.DataFrame) -> list[str]:
        """Decoded token ranges of packed segments (EOS excluded)."""
        full = self._doc_info(table["doc_id"].unique().to_numpy(), text=True)
        by_id = dict(zip(full["doc_id"].to_list(), full["text"].to_list(), strict=True))
        tok = self._tokenizer
        out = []
        for doc, start, end in table.select("doc_id", "token_start", "token_end").iter_rows():
            ids = tok.encode(by_id.get(doc) or "", add_special_tokens=False).ids
            out.append(tok.decode(ids[start:end]))
        return out

    def documents_by_facet(self, facet: str, key: str | None) -> pl.DataFrame | None:
        """A whole file (facet "file") or the whole dataset, from the row offsets; other
        provenance fields would mean reading every file's column: None (not listed)."""
        offsets = self._offsets
        if facet == "dataset":
            lo, hi = (0, int(offsets[-1])) if key == self.data.name else (0, 0)
        elif facet == FILE_FACET:
            names = [s.name for s in self.shards]
            idx = names.index(key) if key in names else None
            lo, hi = (0, 0) if idx is None else (int(offsets[idx]), int(offsets[idx + 1]))
        else:
            return None
        ids = np.arange(lo, hi, dtype=np.int64)
        return pl.DataFrame({"doc_id": ids}).select(
            pl.lit(self.data.name).alias("dataset"), "doc_id"
        )

    def documents(self, docs: pl.DataFrame, *, progress: bool = True) -> pl.DataFrame:
        mine = docs.filter(pl.col("dataset") == self.data.name)
        if len(mine) != len(docs):
            other = docs.filter(pl.col("dataset") != self.data.name)["dataset"][0]
            raise ForensicsError(f"no dataset {other!r} in this run (it has {self.data.name!r})")
        info = self._doc_info(mine["doc_id"].cast(pl.Int64).to_numpy(), text=True)
        keys = mine.select(pl.col("dataset"), pl.col("doc_id").cast(pl.Int64))
        return keys.join(info, on="doc_id", how="left", maintain_order="left")

    def exposure(self, docs: pl.DataFrame, first: int, last: int) -> pl.DataFrame:
        check_iterations(first, last, self.last_iteration, self._where)
        steps, segments = self._plan
        window = steps.filter(pl.col("iteration").is_between(first, last))
        flagged = docs.filter(pl.col("dataset") == self.data.name).select(
            pl.col("doc_id").cast(pl.Int64)
        )
        if segments is None:
            hits = window.join(flagged, left_on="sample", right_on="doc_id", how="semi")
        else:
            bad = segments.join(flagged, on="doc_id", how="semi").select("sample").unique()
            hits = window.join(bad, on="sample", how="semi")
        return exposure_counts(window, hits, first, last)

    def fingerprint(self) -> dict[str, Any]:
        return {
            "format": "hf",
            "config_hash": self.config.config_hash(),
            "datasets_version": self.data.datasets_version or order._datasets().__version__,
            "shards": [
                {"file": str(s.path), "size": s.size, "sha256": sha256_file(s.path)}
                for s in self.shards
            ],
        }
