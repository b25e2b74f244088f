"""The Replayer for MosaicML streaming runs (see dataloaders/base.py for the contract).

A run is cut into segments: an epoch from its start, or, after a resume, the rest of the epoch
the checkpoint's state_dict names (epoch, sample_in_epoch), then whole epochs again. Each
segment's order is built on first use (order.py) as one table,

    steps   iteration Int64, position Int32 (rank * batch_size + j), sample Int64 (global sample
            id over all streams, in stream order), one row per sample the DataLoaders yielded

and its size per iteration is known up front from the partition alone (no shuffle), so a window
at iteration 100k does not shuffle the epochs before it. sample_index counts the samples
consumed before a row (iterations are full global batches except an epoch's short last batch
when drop_last is false). dataset is the stream's name, doc_id = dataset_sample = the sample's
index in its stream (an MDS sample is the unit the loader draws).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np
import polars as pl

from dataloaders.base import REPLAY_KEY_COLUMNS, Replayer, check_iterations, exposure_counts
from dataloaders.console import make_console
from dataloaders.errors import ForensicsError
from dataloaders.mosaic import cache, mds
from dataloaders.mosaic.order import (
    Plan,
    World,
    choose_per_stream,
    default_block_size,
    default_canonical_nodes,
    epoch_partition,
    loader_steps,
    partition_positions,
)
from dataloaders.mosaic.remote import is_object_storage
from dataloaders.mosaic.resume import Setting, check_state, load_state, resume_settings
from dataloaders.schedule import Schedule

SHARD_FACET = "shard"
VALIDATED_VERSIONS = ("0.13.0",)


@dataclass(frozen=True)
class Segment:
    """Iterations first..last (inclusive) come from `epoch`, starting at `sample_in_epoch`."""

    index: int
    epoch: int
    sample_in_epoch: int
    initial_physical_nodes: int | None
    first: int
    sizes: np.ndarray  # int64[iterations]: samples each iteration consumed (all ranks)
    setting: int = 0  # index into MosaicReplayer.settings: the world this part ran on

    @property
    def last(self) -> int:
        return self.first + len(self.sizes) - 1


class MosaicReplayer(Replayer):
    """Replays a StreamingDataset + DataLoader run from a RunConfig with format mosaic-streaming."""

    mixture_weights = True

    def __init__(self, config: Any) -> None:
        self.config = config
        self.data = data = config.data
        self._where = where = f"{config.source}: " if config.source else ""
        if data.streaming_version not in VALIDATED_VERSIONS:
            raise ForensicsError(
                f"{where}data.streaming_version {data.streaming_version}: the replay transcribes "
                f"streaming {', '.join(VALIDATED_VERSIONS)} and is checked only against it"
            )
        if data.shuffle and data.shuffle_algo == "py1b":
            raise ForensicsError(
                f"{where}shuffle_algo py1b was removed in streaming 0.11 (mosaicml/streaming "
                "93af28ab); streaming 0.13 fails on it, so this config cannot describe a 0.13 run"
            )
        if data.batching_method != "random":
            raise ForensicsError(
                f"{where}batching_method {data.batching_method!r} is not replayed yet (only "
                "'random', streaming's default)"
            )
        self.streams = [
            mds.open_stream(s.local, s.remote if is_object_storage(s.remote) else None)
            for s in data.streams
        ]
        self.names = [s.display_name for s in data.streams]
        text_cols = [data.text_field, *[f for f in data.provenance_fields if f != SHARD_FACET]]
        for stream in self.streams:
            mds.check_columns(stream, text_cols, where=where)
        samples_per_stream = np.array([int(s.samples_per_shard.sum()) for s in self.streams])
        self.sample_offsets = np.concatenate([[0], np.cumsum(samples_per_stream)]).astype(np.int64)
        weights = [(s.proportion, s.repeat, s.choose) for s in data.streams]
        try:
            choose = choose_per_stream(
                weights, samples_per_stream, data.epoch_size, data.shuffle_seed
            )
        except ValueError as err:
            raise ForensicsError(f"{where}{err}") from None
        try:
            start = World(data.num_nodes, data.ranks_per_node, max(data.num_workers, 1))
            self.world = start.replicate(data.replication)
        except ValueError as err:
            raise ForensicsError(f"{where}data.replication: {err}") from None
        ncn = data.num_canonical_nodes or default_canonical_nodes(
            data.shuffle_algo, self.world.num_nodes
        )
        self.plan = Plan(
            samples_per_shard=np.concatenate([s.samples_per_shard for s in self.streams]),
            shards_per_stream=np.array([len(s.shards) for s in self.streams], dtype=np.int64),
            choose_per_stream=choose,
            shuffle=data.shuffle,
            shuffle_algo=data.shuffle_algo,
            shuffle_seed=data.shuffle_seed,
            shuffle_block_size=data.shuffle_block_size or default_block_size(ncn),
            num_canonical_nodes=ncn,
            partition_algo=data.partition_algo,
            sampling_method=data.sampling_method,
            sampling_granularity=data.sampling_granularity,
            batch_size=data.batch_size,
            drop_last=data.drop_last,
        )
        self._check_partition()
        self._load_resumes()

    @cached_property
    def schedule(self) -> Schedule:
        """The schedule of the training section (one data stage, no applied skips; restarts
        are data.resumes), built when a skip plan asks."""
        return Schedule(self.config.training)

    # ------------------------------------------------------------------ validation

    def _load_resumes(self) -> None:
        """settings[0]: the run's start; settings[k]: the world after data.resumes[k - 1];
        resume_states: each restart's state_dict, checked against the config."""
        data, where = self.data, self._where
        self.settings = [Setting(self.world, data.batch_size)] + resume_settings(
            data, data.global_batch_size, where
        )
        self.resume_states = []
        for k, resume in enumerate(data.resumes):
            state = load_state(resume)
            check_state(
                state,
                plan=self.plan,
                data=data,
                start=self.world,
                setting=self.settings[k + 1],
                where=f"{where}data.resumes (iteration {resume.iteration}): ",
            )
            self.resume_states.append(state)

    def _check_partition(self) -> None:
        ncn, nodes = self.plan.num_canonical_nodes, self.world.num_nodes
        if max(ncn, nodes) % min(ncn, nodes):
            raise ForensicsError(
                f"{self._where}num_canonical_nodes {ncn} and num_nodes {nodes}: one must divide "
                "the other (streaming refuses the run otherwise)"
            )

    # ------------------------------------------------------------------ the order

    @cached_property
    def _limit(self) -> int:
        return int(self.config.training.iterations(self.data.global_batch_size))

    def _plan(self, setting: int) -> tuple[Plan, World]:
        """The plan and world of the run's part `setting` (0: the start, k: after resume k)."""
        now = self.settings[setting]
        return replace(self.plan, batch_size=now.batch_size), now.world

    def _partition(self, epoch: int, sample_in_epoch: int, ipn: int | None, setting: int):
        plan, world = self._plan(setting)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                return partition_positions(plan, world, sample_in_epoch, ipn)
            except ValueError as err:
                raise ForensicsError(f"{self._where}{err}") from None

    def _iteration_sizes(self, epoch: int, sample: int, ipn: int | None, setting: int):
        """Samples per iteration of a segment, from the partition's padding alone."""
        ids = self._partition(epoch, sample, ipn, setting)
        batch_size = self.settings[setting].batch_size
        batch, _, _ = loader_steps(ids, batch_size, self.plan.drop_last)
        return np.bincount(batch).astype(np.int64) if len(batch) else np.zeros(0, np.int64)

    @cached_property
    def segments(self) -> list[Segment]:
        """The run's segments up to the last iteration (module docstring), cached on disk."""
        hit = cache.load_sizes(self._key)
        try:
            if hit is not None:
                return [
                    Segment(
                        k,
                        s["epoch"],
                        s["sample"],
                        s["ipn"],
                        s["first"],
                        np.array(s["sizes"]),
                        s["setting"],
                    )  # fmt: skip
                    for k, s in enumerate(hit)
                ]
        except (KeyError, TypeError):
            pass
        out = self._build_segments()
        cache.save_sizes(
            self._key,
            [
                {
                    "epoch": s.epoch,
                    "sample": s.sample_in_epoch,
                    "ipn": s.initial_physical_nodes,
                    "first": s.first,
                    "sizes": s.sizes.tolist(),
                    "setting": s.setting,
                }
                for s in out
            ],
        )
        return out

    def _build_segments(self) -> list[Segment]:
        out: list[Segment] = []
        resumes = list(zip(self.data.resumes, self.resume_states, strict=True))
        it, epoch, sample, ipn, setting = 1, 0, 0, None, 0
        empty_run = 0
        for resume, _ in resumes:
            if resume.iteration > self._limit:
                raise ForensicsError(
                    f"{self._where}data.resumes: iteration {resume.iteration} is after the end "
                    f"of training ({self._limit})"
                )
        while it <= self._limit or resumes:
            if resumes and resumes[0][0].iteration <= it:
                resume, state = resumes.pop(0)
                # Segments built past the restart did not happen: cut them at the restart.
                out = [seg for seg in out if seg.first < resume.iteration]
                if out and out[-1].last >= resume.iteration:
                    last = out[-1]
                    out[-1] = replace(last, sizes=last.sizes[: resume.iteration - last.first])
                setting += 1
                it = resume.iteration
                epoch, sample = state.epoch, state.sample_in_epoch
                ipn = state.initial_physical_nodes
            sizes = self._iteration_sizes(epoch, sample, ipn, setting)
            empty_run = empty_run + 1 if len(sizes) == 0 else 0
            if empty_run > 1:
                raise ForensicsError(f"{self._where}epochs yield no full batch: nothing to replay")
            sizes = sizes[: self._limit - it + 1]
            if len(sizes):
                out.append(Segment(len(out), epoch, sample, ipn, it, sizes, setting))
                it += len(sizes)
            # The next epoch starts at its sample 0 (also after a state saved at a padded epoch
            # end, whose partition is empty: resume.py); a resumed run keeps the checkpoint's
            # initial_physical_nodes for later epochs too (dataset.py:_resume sets it once).
            epoch, sample = epoch + 1, 0
        return out

    @cached_property
    def _key(self) -> str:
        states = [s.model_dump(mode="json") for s in self.resume_states]  # state_file contents
        return cache.run_key(self.config, [mds.describe(s) for s in self.streams] + states)

    def _segment_steps(self, seg: Segment) -> pl.DataFrame:
        """iteration, position, sample of one segment (memory, then disk cache, then built)."""
        memo = self.__dict__.setdefault("_steps_memo", {})
        if seg.index in memo:
            return memo[seg.index]
        frame = cache.load_segment(self._key, seg.index)
        if frame is None or frame.height != int(seg.sizes.sum()):
            frame = self._build_segment(seg)
            cache.save_segment(self._key, seg.index, frame)
        memo[seg.index] = frame
        return frame

    def _build_segment(self, seg: Segment) -> pl.DataFrame:
        plan, world = self._plan(seg.setting)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ids = epoch_partition(
                plan, world, seg.epoch, seg.sample_in_epoch, seg.initial_physical_nodes
            )
        batch, pos, sample = loader_steps(ids, plan.batch_size, plan.drop_last)
        keep = batch < len(seg.sizes)
        return pl.DataFrame(
            {
                "iteration": batch[keep].astype(np.int64) + seg.first,
                "position": pos[keep],
                "sample": sample[keep],
            }
        )

    def _steps(self, first: int, last: int, *, progress: bool = True) -> pl.DataFrame:
        """iteration, position, sample rows of iterations first..last; segments not yet in
        memory are built (or read from the cache) under a progress bar."""
        from rich.progress import Progress

        wanted = [s for s in self.segments if s.last >= first and s.first <= last]
        console = make_console(stderr=True)
        frames = []
        with Progress(
            console=console, transient=True, disable=not (progress and console.is_terminal)
        ) as bar:
            task = bar.add_task("order of the streaming epochs", total=len(wanted))
            for seg in wanted:
                steps = self._segment_steps(seg)
                frames.append(steps.filter(pl.col("iteration").is_between(first, last)))
                bar.advance(task)
        if not frames:
            return pl.DataFrame(
                schema={"iteration": pl.Int64, "position": pl.Int32, "sample": pl.Int64}
            )
        return pl.concat(frames)

    @cached_property
    def _first_sample(self) -> np.ndarray:
        """int64[last_iteration + 2]: samples consumed before iteration i (index 0 unused)."""
        sizes = np.concatenate([[0]] + [s.sizes for s in self.segments]).astype(np.int64)
        return np.concatenate([[0], np.cumsum(sizes)])[:-1].astype(np.int64)

    # ------------------------------------------------------------------ the protocol

    @property
    def last_iteration(self) -> int:
        return self.segments[-1].last if self.segments else 0

    @property
    def facets(self) -> list[str]:
        return [SHARD_FACET] + [f for f in self.data.provenance_fields if f != SHARD_FACET]

    def iteration_samples(self, first: int, last: int) -> pl.DataFrame:
        check_iterations(first, last, self.last_iteration, self._where)
        it = np.arange(first, last + 1, dtype=np.int64)
        start = self._first_sample[first : last + 1]
        return pl.DataFrame(
            {
                "iteration": it,
                "first_sample": start,
                "end_sample": self._first_sample[first + 1 : last + 2]
                if last + 1 < len(self._first_sample)
                else np.append(start[1:], start[-1] + self.segments[-1].sizes[-1]),
                "stage": np.zeros(len(it), dtype=np.int32),
            }
        )

    def _split_ids(self, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """global sample id -> (stream index, index in the stream)."""
        stream = np.searchsorted(self.sample_offsets, samples, side="right") - 1
        return stream, samples - self.sample_offsets[stream]

    def replay(
        self, first: int, last: int, *, text: bool = False, progress: bool = True
    ) -> pl.DataFrame:
        check_iterations(first, last, self.last_iteration, self._where)
        steps = self._steps(first, last, progress=progress).sort("iteration", "position")
        stream, local = self._split_ids(steps["sample"].to_numpy())
        names = np.array(self.names, dtype=object)
        its = steps["iteration"].to_numpy()
        rank_in_iter = np.arange(len(its)) - np.searchsorted(its, its, side="left")
        table = steps.with_columns(
            pl.Series("sample_index", self._first_sample[its] + rank_in_iter, pl.Int64),
            pl.lit(0, pl.Int32).alias("stage"),
            pl.Series("dataset", names[stream].tolist() if len(stream) else [], pl.Utf8),
            pl.Series("dataset_sample", local, pl.Int64),
            pl.Series("doc_id", local, pl.Int64),
            pl.lit(0, pl.Int64).alias("token_start"),
            pl.lit(None, pl.Int64).alias("token_end"),  # the whole sample
            pl.lit(True).alias("exact"),
        )
        keys = table.select("dataset", "doc_id").unique()
        info = self._doc_info(keys, text=text)
        table = table.join(info, on=["dataset", "doc_id"], how="left", maintain_order="left")
        columns = [*REPLAY_KEY_COLUMNS, *self.facets, *(["text"] if text else []), "exact"]
        return table.select(columns)

    def _doc_info(self, keys: pl.DataFrame, *, text: bool) -> pl.DataFrame:
        """dataset, doc_id, shard, provenance fields (and text) of the given samples."""
        fields = [f for f in self.data.provenance_fields if f != SHARD_FACET]
        columns = fields + ([self.data.text_field] if text else [])
        schema = {"dataset": pl.Utf8, "doc_id": pl.Int64, SHARD_FACET: pl.Utf8}
        schema.update({c: pl.Utf8 for c in columns})
        frames = []
        for name, group in keys.group_by("dataset", maintain_order=True):
            name = name[0]
            if name not in self.names:
                raise ForensicsError(f"no stream {name!r} in this run (it has {self.names})")
            stream = self.streams[self.names.index(name)]
            doc_ids = group["doc_id"].cast(pl.Int64).to_numpy()
            offsets = np.concatenate([[0], np.cumsum(stream.samples_per_shard)])
            if len(doc_ids) and (doc_ids.min() < 0 or doc_ids.max() >= offsets[-1]):
                raise ForensicsError(f"doc_id outside 0..{offsets[-1] - 1} for stream {name!r}")
            shard = np.searchsorted(offsets, doc_ids, side="right") - 1
            for idx in np.unique(shard):
                mask = shard == idx
                rows = doc_ids[mask] - offsets[idx]
                part = {
                    "dataset": [name] * int(mask.sum()),
                    "doc_id": doc_ids[mask],
                    SHARD_FACET: [stream.shards[idx].path.name] * int(mask.sum()),
                }
                if columns:
                    part.update(mds.read_columns(stream.shards[idx], rows, columns))
                frames.append(pl.DataFrame(part, schema=schema))
        if not frames:
            frame = pl.DataFrame(schema=schema)
        else:
            frame = pl.concat(frames)
        if text and self.data.text_field != "text":
            frame = frame.rename({self.data.text_field: "text"})
        return frame.unique(["dataset", "doc_id"], maintain_order=True)

    def documents_by_facet(self, facet: str, key: str | None) -> pl.DataFrame | None:
        """A whole shard (facet "shard") or a whole stream ("dataset"), from the shards' sample
        counts; other provenance fields would mean reading every shard: None (not listed)."""
        frames = []
        for name, stream in zip(self.names, self.streams, strict=True):
            offsets = np.concatenate([[0], np.cumsum(stream.samples_per_shard)]).astype(np.int64)
            if facet == "dataset" and key == name:
                spans = [(0, int(offsets[-1]))]
            elif facet == SHARD_FACET:
                names = [shard.path.name for shard in stream.shards]
                spans = [
                    (int(offsets[i]), int(offsets[i + 1])) for i, n in enumerate(names) if n == key
                ]
            elif facet == "dataset":
                continue
            else:
                return None
            for lo, hi in spans:
                frames.append(pl.DataFrame({"dataset": name, "doc_id": np.arange(lo, hi)}))
        if not frames:
            return pl.DataFrame(schema={"dataset": pl.Utf8, "doc_id": pl.Int64})
        return pl.concat(frames).cast({"doc_id": pl.Int64})

    def documents(self, docs: pl.DataFrame, *, progress: bool = True) -> pl.DataFrame:
        keys = docs.select(pl.col("dataset"), pl.col("doc_id").cast(pl.Int64))
        info = self._doc_info(keys.unique(), text=True)
        return keys.join(info, on=["dataset", "doc_id"], how="left", maintain_order="left")

    def exposure(self, docs: pl.DataFrame, first: int, last: int) -> pl.DataFrame:
        check_iterations(first, last, self.last_iteration, self._where)
        steps = self._steps(first, last)
        stream, local = self._split_ids(steps["sample"].to_numpy())
        names = np.array(self.names, dtype=object)
        steps = steps.with_columns(
            pl.Series("dataset", names[stream].tolist() if len(stream) else [], pl.Utf8),
            pl.Series("doc_id", local, pl.Int64),
        )
        flagged = docs.select(pl.col("dataset"), pl.col("doc_id").cast(pl.Int64)).unique()
        hits = steps.join(flagged, on=["dataset", "doc_id"], how="semi")
        return exposure_counts(steps, hits, first, last)

    def blend_shares(self, stage: int) -> tuple[dict[str, float], str]:
        """Each stream's share of an epoch's samples (proportion / repeat / choose), and what it
        comes from. A streaming run has one stage."""
        choose = self.plan.choose_per_stream
        shares = (choose / max(int(choose.sum()), 1)).tolist()
        return dict(zip(self.names, shares, strict=True)), "stream weights"

    @property
    def notes(self) -> list[str]:
        """One-line notes on the config for the user: the fields it sets that were accepted
        but cannot change the order (dataloaders/mosaic/config.py says why for each)."""
        ignored = self.data.ignored_fields
        if not ignored:
            return []
        return [
            f"data: {', '.join(ignored)} accepted and ignored: they do not change the sample "
            "order (downloading, caching, tokenization or DataLoader prefetch)"
        ]

    def fingerprint(self) -> dict[str, Any]:
        return {
            "format": "mosaic-streaming",
            "config_hash": self.config.config_hash(),
            "streaming_version": self.data.streaming_version,
            "num_canonical_nodes": self.plan.num_canonical_nodes,
            "shuffle_seed": self.plan.shuffle_seed,
            "streams": [
                {"name": n, **mds.describe(s)}
                for n, s in zip(self.names, self.streams, strict=True)
            ],
        }
