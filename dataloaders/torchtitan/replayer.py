"""The Replayer of torchtitan runs (see dataloaders/base.py for the contract).

The run's order is built once, on first use (plan.py): one row per (iteration, position) naming
a sample of a rank's packed stream of one source (streams.py); a window's rows are then cut into
the documents each sample holds. doc_id is the row number over the source's files in order;
token_start..token_end index the document's ids as torchtitan encodes them (BOS first, the EOS
last; a sample's input holds ids[token_start:token_end] and its labels the same range shifted by
one). `dataset_sample` is the sample's number in its rank's stream of that source (from the run's
start, or from the last resume).
"""

from __future__ import annotations

from functools import cached_property
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
from dataloaders.errors import ForensicsError
from dataloaders.hf.doc_rows import FILE_FACET
from dataloaders.hf.shards import sha256_file
from dataloaders.schedule import Schedule
from dataloaders.torchtitan.plan import KEY_SHIFT, Planner
from dataloaders.torchtitan.sources import Source
from dataloaders.torchtitan.state import read_loader_states
from dataloaders.torchtitan.tokens import TitanTokenizer


class TitanReplayer(Replayer):
    """Replays torchtitan 0.3.0's HuggingFaceTextDataLoader / InterleavedHuggingFaceTextDataLoader
    from a RunConfig with format torchtitan."""

    document_token_ids = True
    mixture_weights = True

    def __init__(self, config: Any):
        self.config = config
        self.data = config.data
        self.source_path = config.source
        self._where = f"{config.source}: " if config.source else ""
        self.sources = [Source(spec, config.source) for spec in self.data.sources]
        self.gbs = config.training.global_batch_size
        self.by_name = {s.name: s for s in self.sources}

    @cached_property
    def schedule(self) -> Schedule:
        return Schedule(self.config.training)

    @cached_property
    def titan_tokenizer(self) -> TitanTokenizer:
        """The run's tokenizer folder, encoding as torchtitan's text loader does."""
        return TitanTokenizer(self.config.tokenizer)

    def tokenizer(self) -> Any:
        """The `tokenizers.Tokenizer` behind it (with tokenizer_config.json's special tokens
        added, as torchtitan adds them), what the token rules decode with."""
        return self.titan_tokenizer.tokenizer

    def vocab_size(self) -> int:
        """The tokenizer's vocabulary, added tokens included (ids past it are refused)."""
        return int(self.tokenizer().get_vocab_size(with_added_tokens=True))

    # ------------------------------------------------------------------ the plan

    @cached_property
    def _planned(self) -> tuple[pl.DataFrame, Planner]:
        """(steps: iteration, position, key; the planner holding the streams)."""
        planner = Planner(self.data, self.sources, self.titan_tokenizer, self.gbs)
        limit = self.config.training.iterations(self.gbs)
        bounds = [r.iteration for r in self.data.resumes if r.iteration < limit] + [limit]
        frames, first = [], 0  # `first`: the steps trained before the phase
        for phase, end in enumerate(bounds):
            starts = self._phase_starts(planner, phase)
            per_rank = [
                planner.rank_steps(rank, start, end - first) for rank, start in enumerate(starts)
            ]
            done = min(int(f["step"].max()) + 1 if len(f) else 0 for f in per_rank)
            phase_rows = pl.concat(per_rank).filter(pl.col("step") < done)
            frames.append(phase_rows.with_columns((pl.col("step") + first + 1).alias("iteration")))
            if done < end - first:
                break  # the data ran out: the run stopped here
            first = end
        steps = (
            pl.concat(frames).select("iteration", "position", "key").sort("iteration", "position")
        )
        return steps, planner

    def _phase_starts(self, planner: Planner, phase: int) -> list[Any]:
        """Every rank's start of phase `phase`: the first step, or resume phase-1's saved state."""
        if not phase:
            return [planner.fresh() for _ in range(self.data.dp_world_size)]
        resume = self.data.resumes[phase - 1]
        states = read_loader_states(resume.checkpoint)
        if len(states) != self.data.dp_world_size:
            raise ForensicsError(
                f"{resume.checkpoint}: saved by {len(states)} DP ranks, data.dp_world_size is "
                f"{self.data.dp_world_size} (torchtitan cannot reshard it either, "
                "components/dataloader.py:161-164)"
            )
        return planner.resumed(states, str(resume.checkpoint))

    def _segments(self, keys: pl.Series) -> pl.DataFrame:
        """key -> dataset, doc_id, token_start, token_end, dataset_sample rows of the samples."""
        _steps, planner = self._planned
        keys_np = np.unique(keys.to_numpy())
        frames = []
        for stream_id in np.unique(keys_np >> KEY_SHIFT):
            source, stream = planner.streams[int(stream_id)]
            ks = keys_np[(keys_np >> KEY_SHIFT) == stream_id] & ((1 << KEY_SHIFT) - 1)
            segs = stream.segments(ks)
            frames.append(
                segs.with_columns(
                    ((pl.lit(int(stream_id), pl.Int64) * (1 << KEY_SHIFT)) + pl.col("k")).alias(
                        "key"
                    ),
                    pl.lit(self.sources[source].name).alias("dataset"),
                    pl.col("k").alias("dataset_sample"),
                ).drop("k")
            )
        return pl.concat(frames)

    # ------------------------------------------------------------------ the protocol

    @property
    def last_iteration(self) -> int:
        steps, _ = self._planned
        return int(steps["iteration"].max() or 0)

    @property
    def facets(self) -> list[str]:
        extra = [f for s in self.sources for f in s.spec.provenance_fields if f != FILE_FACET]
        return [FILE_FACET, *dict.fromkeys(extra)]

    def iteration_samples(self, first: int, last: int) -> pl.DataFrame:
        return fixed_batch_samples(first, last, self.gbs, self.last_iteration, self._where)

    def replay(
        self, first: int, last: int, *, text: bool = False, progress: bool = True
    ) -> pl.DataFrame:
        check_iterations(first, last, self.last_iteration, self._where)
        steps, _ = self._planned
        window = steps.filter(pl.col("iteration").is_between(first, last))
        table = window.join(
            self._segments(window["key"]), on="key", how="left", maintain_order="left"
        )
        table = table.with_columns(
            ((pl.col("iteration") - 1) * self.gbs + pl.col("position")).alias("sample_index"),
            pl.lit(0, pl.Int32).alias("stage"),
            pl.lit(True).alias("exact"),
        )
        info = self._doc_info(table.select("dataset", "doc_id").unique(), text=False)
        table = table.join(info, on=["dataset", "doc_id"], how="left", maintain_order="left")
        if text:
            table = table.with_columns(pl.Series("text", self._segment_texts(table), pl.Utf8))
        columns = [*REPLAY_KEY_COLUMNS, *self.facets, *(["text"] if text else []), "exact"]
        return table.select(columns).cast(
            {"iteration": pl.Int64, "position": pl.Int32, "dataset_sample": pl.Int64}
        )

    def _doc_info(self, docs: pl.DataFrame, *, text: bool) -> pl.DataFrame:
        """dataset, doc_id, the facets (and text) of the given documents."""
        frames = []
        for name in docs["dataset"].unique().to_list():
            source = self._source(name)
            ids = docs.filter(pl.col("dataset") == name)["doc_id"].cast(pl.Int64).to_numpy()
            frames.append(
                source.doc_info(ids, text=text).with_columns(pl.lit(name).alias("dataset"))
            )
        columns = ["dataset", "doc_id", *self.facets, *(["text"] if text else [])]
        if not frames:
            return pl.DataFrame(schema={c: pl.Int64 if c == "doc_id" else pl.Utf8 for c in columns})
        frame = pl.concat(frames, how="diagonal_relaxed")
        missing = [pl.lit(None, pl.Utf8).alias(c) for c in columns if c not in frame.columns]
        return frame.with_columns(missing).select(columns)

    def _source(self, name: str) -> Source:
        if name not in self.by_name:
            raise ForensicsError(f"no dataset {name!r} in this run (it has {sorted(self.by_name)})")
        return self.by_name[name]

    def _segment_texts(self, table: pl.DataFrame) -> list[str]:
        """The decoded token range of each segment (BOS and EOS as the model saw them)."""
        tokens = {}
        for name in table["dataset"].unique().to_list():
            ids = table.filter(pl.col("dataset") == name)["doc_id"].to_numpy()
            for doc, encoded in self._source(name).doc_tokens(ids, self.titan_tokenizer).items():
                tokens[(name, doc)] = encoded
        return [
            self.titan_tokenizer.decode(tokens[(name, doc)][start:end])
            for name, doc, start, end in table.select(
                "dataset", "doc_id", "token_start", "token_end"
            ).iter_rows()
        ]

    def documents(self, docs: pl.DataFrame, *, progress: bool = True) -> pl.DataFrame:
        keys = docs.select(pl.col("dataset"), pl.col("doc_id").cast(pl.Int64))
        info = self._doc_info(keys.unique(), text=True)
        return keys.join(info, on=["dataset", "doc_id"], how="left", maintain_order="left")

    def document_tokens(self, docs: pl.DataFrame) -> list[Any]:
        found: dict[tuple[str, int], list[int]] = {}
        for name in docs["dataset"].unique().to_list():
            ids = docs.filter(pl.col("dataset") == name)["doc_id"].cast(pl.Int64).to_numpy()
            for doc, encoded in self._source(name).doc_tokens(ids, self.titan_tokenizer).items():
                found[(name, doc)] = encoded
        return [
            np.asarray(found[(name, int(doc))], dtype=np.int64)
            for name, doc in docs.select("dataset", "doc_id").iter_rows()
        ]

    def blend_shares(self, stage: int) -> tuple[dict[str, float], str]:
        total = sum(s.spec.weight for s in self.sources)
        return {s.name: s.spec.weight / total for s in self.sources}, "source weights"

    def exposure(self, docs: pl.DataFrame, first: int, last: int) -> pl.DataFrame:
        check_iterations(first, last, self.last_iteration, self._where)
        steps, _ = self._planned
        window = steps.filter(pl.col("iteration").is_between(first, last))
        segs = self._segments(window["key"])
        flagged = docs.select(pl.col("dataset"), pl.col("doc_id").cast(pl.Int64))
        bad = segs.join(flagged, on=["dataset", "doc_id"], how="semi").select("key").unique()
        hits = window.join(bad, on="key", how="semi")
        return exposure_counts(window, hits, first, last)

    def documents_by_facet(self, facet: str, key: str | None) -> pl.DataFrame | None:
        """A whole source (facet "dataset") or one of its files (facet "file"); other facets
        would mean reading every file: None."""
        frames = []
        for source in self.sources:
            offsets = source.offsets
            if facet == "dataset":
                lo, hi = (0, int(offsets[-1])) if key == source.name else (0, 0)
            elif facet == FILE_FACET:
                names = [s.name for s in source.shards]
                idx = names.index(key) if key in names else None
                lo, hi = (0, 0) if idx is None else (int(offsets[idx]), int(offsets[idx + 1]))
            else:
                return None
            frames.append(
                pl.DataFrame({"doc_id": np.arange(lo, hi, dtype=np.int64)}).select(
                    pl.lit(source.name).alias("dataset"), "doc_id"
                )
            )
        return pl.concat(frames)

    def fingerprint(self) -> dict[str, Any]:
        return {
            "format": "torchtitan",
            "config_hash": self.config.config_hash(),
            "shards": [
                {"file": str(sh.path), "size": sh.size, "sha256": sha256_file(sh.path)}
                for s in self.sources
                for sh in s.shards
            ],
        }
