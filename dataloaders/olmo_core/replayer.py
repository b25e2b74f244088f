"""The Replayer for OLMo-core runs (see dataloaders/base.py for the table it returns).

Iteration i (the trainer's 1-based `global_step`) consumed row (i - 1) % B of epoch
(i - 1) // B + 1's global indices (B = batches per epoch = dataset instances // instances per
batch); dataloaders/olmo_core/order.py has the details and the position convention. Each instance
is S consecutive tokens of one token file; its rows in the table are the documents it overlaps
(dataloaders/olmo_core/files.py says what a document is).

Columns beyond the shared ones: `file` (the token file), the Dolma metadata fields when the run
has them, and `instance_masked` when the config has an instance filter (True: OLMo-core's
repeated n-gram filter masked this instance out of the loss; it was still drawn).

doc_id = (file number within its source) * 2**40 + (document number within the file): finding a
document never needs the other files of a source scanned (a real run has thousands of them).

Data stages: a restart on other data (OLMo-core's `ignore_fingerprint_mismatch`, a resume with
`sources`) keeps the state's epoch and `batches_processed = tokens_processed // batch tokens` and
continues over the NEW dataset's global indices (data_loader.py load_state_dict and
_get_local_instance_indices); `stage` is that stage's number and `dataset_sample` the instance
index in its dataset. An epoch whose batches are already all processed yields nothing.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dataloaders.base import REPLAY_KEY_COLUMNS, Replayer, check_iterations, fixed_batch_samples
from dataloaders.errors import ForensicsError
from dataloaders.olmo_core import cache, files, order, paths
from dataloaders.olmo_core.documents import FILE_FACET, OlmoCoreDocuments
from dataloaders.olmo_core.state import load_state
from dataloaders.progress import progress_bar as _progress
from dataloaders.schedule import Schedule

MASK_COLUMN = "instance_masked"
DOC_SHIFT = 40  # doc_id = file_in_source << 40 | document number in the file


class Stage:
    """One dataset of the run and where in its order the run entered it."""

    def __init__(self, number: int, start: int, tokens: list[files.TokenFile], abs0: int):
        self.number = number
        self.start = start  # first iteration of the stage
        self.files = tokens
        counts = np.asarray([f.instances for f in tokens], dtype=np.int64)
        self.instance_starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        self.size = int(counts.sum())
        self.abs0 = abs0  # batches of this dataset's order consumed before the stage's start
        self.batches_per_epoch = 0
        self.epochs: dict[int, np.ndarray] = {}

    def file_of(self, instances: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.instance_starts, instances, side="right") - 1

    def location(self, iterations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(epoch 1-based, batch in the epoch) of iterations of this stage."""
        absolute = self.abs0 + np.asarray(iterations, dtype=np.int64) - self.start
        return absolute // self.batches_per_epoch + 1, absolute % self.batches_per_epoch


class OlmoCoreReplayer(OlmoCoreDocuments, Replayer):
    """Replays an OLMo-core NumpyFSLDataset / NumpyFSLDataLoader run from its RunConfig."""

    instance_samples = True
    document_token_ids = True
    mixture_weights = True

    def __init__(self, config: Any):
        self.config = config
        self.data = data = config.data
        self._where = f"{config.source}: " if config.source else ""
        training = config.training
        self.ipb = data.instances_per_batch
        target = data.max_target_sequence_length
        self.chunk = target // data.sequence_length if target is not None else 1
        known: dict[Path, files.TokenFile] = {}
        first = self._stage_files(None if data.mix is not None else data.sources, known)
        self.stages = [self._new_stage(0, 1, first, 0)]
        for resume in data.resumes:
            state = self._check_resume(resume)
            if resume.sources:
                tokens = self._stage_files(resume.sources, known)
                done = int(state["tokens_processed"]) // data.global_batch_size
                stage = self._new_stage(len(self.stages), resume.iteration, tokens, 0)
                epoch = int(state["epoch"])
                if done >= stage.batches_per_epoch:  # that epoch has nothing left: the next one
                    epoch, done = epoch + 1, 0
                stage.abs0 = (epoch - 1) * stage.batches_per_epoch + done
                self.stages.append(stage)
        self.files = list(known.values())
        self.sources = list(dict.fromkeys(f.source for f in self.files))
        self._file_index = {f.path: i for i, f in enumerate(self.files)}
        self._file_in_source: list[int] = []
        seen: dict[str, int] = {}
        for f in self.files:
            self._file_in_source.append(seen.get(f.source, 0))
            seen[f.source] = seen.get(f.source, 0) + 1
        self.size = self.stages[0].size
        self.batches_per_epoch = self.stages[0].batches_per_epoch
        # Global steps and samples, and the steps an earlier restart's steps_to_skip drew but
        # did not train (training.applied_skips, replayed through OLMo-core's loop).
        self.schedule = Schedule(training, data.stage_start_iterations)

    def _stage_files(
        self, sources: list[Any] | None, known: dict[Path, files.TokenFile]
    ) -> list[files.TokenFile]:
        """A data stage's token files in the dataset's order (paths.py: the mix, globs and the
        source permutation). `known` keeps them in the order before the permutation: a
        document's doc_id numbers its file within the source in that order."""
        pairs = paths.resolved_paths(self.data, sources)
        opened = files.open_token_files(pairs, self.data, self._where, known)
        order_ = paths.permutation(len(opened), self.data.source_permutation_seed)
        return [opened[i] for i in order_]

    def _new_stage(
        self, number: int, start: int, tokens: list[files.TokenFile], abs0: int
    ) -> Stage:
        stage = Stage(number, start, tokens, abs0)
        stage.batches_per_epoch = stage.size // self.ipb
        if stage.batches_per_epoch == 0:
            raise ForensicsError(
                f"{self._where}the token files of data stage {number} hold {stage.size} "
                f"instances, fewer than one global batch of {self.ipb}"
            )
        return stage

    # ------------------------------------------------------------------ order

    @property
    def olmo_fingerprint(self) -> str:
        """The dataset fingerprint OLMo-core stores in its data-loader state (first stage)."""
        return files.olmo_fingerprint(self.stages[0].files, self.data)

    def global_indices(self, epoch: int, stage: int = 0) -> np.ndarray:
        """The epoch's instance permutation: the run's saved file when present, else rebuilt."""
        st = self.stages[stage]
        if epoch not in st.epochs:
            data = self.data
            name = order.global_indices_name(
                seed=data.seed,
                epoch=epoch,
                dataset_size=st.size,
                chunk=self.chunk,
                shuffle=data.shuffle,
            )
            saved = data.work_dir / name if data.work_dir is not None else None
            if saved is not None and saved.is_file():
                indices = order.saved_global_indices(saved, st.size)
            else:
                indices = cache.load_indices(name)
                if indices is None or len(indices) != st.size:
                    indices = order.build_global_indices(
                        st.size,
                        seed=data.seed,
                        epoch=epoch,
                        chunk=self.chunk,
                        shuffle=data.shuffle,
                    )
                    cache.save_indices(name, indices)
            st.epochs[epoch] = indices
        return st.epochs[epoch]

    def stage_of(self, iterations: np.ndarray) -> np.ndarray:
        """Data stage number of each iteration."""
        starts = np.asarray([st.start for st in self.stages], dtype=np.int64)
        return np.searchsorted(starts, np.asarray(iterations, dtype=np.int64), side="right") - 1

    def _grid(self, stage: Stage, epoch: int) -> np.ndarray:
        rows = self.global_indices(epoch, stage.number)[: stage.batches_per_epoch * self.ipb]
        return rows.reshape(stage.batches_per_epoch, self.ipb)

    def batch_instances(self, iterations: np.ndarray) -> np.ndarray:
        """(len(iterations), ipb) instance indices (in each one's stage dataset), columns in
        position order."""
        its = np.asarray(iterations, dtype=np.int64)
        cols = order.position_columns(self.ipb, self.data.dp_world_size)
        out = np.empty((len(its), self.ipb), dtype=np.int64)
        stage_no = self.stage_of(its)
        for k in np.unique(stage_no):
            stage = self.stages[int(k)]
            in_stage = stage_no == k
            epochs, batches = stage.location(its[in_stage])
            part = np.empty((int(in_stage.sum()), self.ipb), dtype=np.int64)
            for e in np.unique(epochs):
                sel = epochs == e
                part[sel] = self._grid(stage, int(e))[batches[sel]][:, cols]
            out[in_stage] = part
        return out

    def _check_resume(self, resume: Any) -> dict[str, Any]:
        """A restart's data-loader state must be the run's: seed, the fingerprint of the data in
        force before it, and the position the replay reaches at that iteration."""
        state = load_state(resume.state)
        where = f"{resume.state}"
        stage = self.stages[-1]
        want = {
            "dataset_type": "fsl",
            "seed": self.data.seed,
            "dataset_fingerprint_version": files.FINGERPRINT_VERSION,
            "dataset_fingerprint": files.olmo_fingerprint(stage.files, self.data),
            "sequence_length": self.data.sequence_length,
            "max_target_sequence_length": self.data.max_target_sequence_length,
        }
        for key, value in want.items():
            if key not in state:
                raise ForensicsError(f"{where}: no {key!r} in the data-loader state")
            if state[key] != value:
                what = "config" if key != "dataset_fingerprint" else "token files"
                raise ForensicsError(
                    f"{where}: {key} {state[key]!r} differs from the {what} ({value!r}); "
                    "this state is not from this run, or the data changed"
                )
        batches = int(state["tokens_processed"]) // self.data.global_batch_size
        done = (int(state["epoch"]) - 1) * stage.batches_per_epoch + batches
        expected = stage.abs0 + resume.iteration - stage.start
        if done != expected:
            raise ForensicsError(
                f"{where}: the state resumes after {done - stage.abs0 + stage.start - 1} steps "
                f"(epoch {state['epoch']}, {batches} batches), but data.resumes says iteration "
                f"{resume.iteration}"
            )
        return state

    # ------------------------------------------------------------------ the protocol

    @property
    def last_iteration(self) -> int:
        return int(self.config.training.iterations(self.ipb))

    @property
    def facets(self) -> list[str]:
        return [FILE_FACET, *self._meta_fields]

    @cached_property
    def _meta_fields(self) -> list[str]:
        if any(f.metadata is not None for f in self.files):
            return [m for m in self.data.metadata_fields if m != FILE_FACET]
        return []

    def iteration_samples(self, first: int, last: int) -> pl.DataFrame:
        last_it, where = self.last_iteration, self._where
        return fixed_batch_samples(first, last, self.ipb, last_it, where, self.stage_of)

    def _place(self, instances: np.ndarray, stages: np.ndarray | None) -> tuple[np.ndarray, ...]:
        """(file index in self.files, instance number within that file) of stage instances."""
        inst = np.asarray(instances, dtype=np.int64)
        st = np.zeros(len(inst), dtype=np.int64) if stages is None else np.asarray(stages)
        fidx = np.empty(len(inst), dtype=np.int64)
        local = np.empty(len(inst), dtype=np.int64)
        for k in np.unique(st):
            stage = self.stages[int(k)]
            sel = st == k
            if len(inst[sel]) and (inst[sel].min() < 0 or inst[sel].max() >= stage.size):
                raise ForensicsError(f"instance outside 0..{stage.size - 1} of data stage {k}")
            in_stage = stage.file_of(inst[sel])
            union = np.asarray([self._file_index[f.path] for f in stage.files], dtype=np.int64)
            fidx[sel] = union[in_stage]
            local[sel] = inst[sel] - stage.instance_starts[in_stage]
        return fidx, local

    def segments(
        self, instances: np.ndarray, stages: np.ndarray | None = None
    ) -> dict[str, np.ndarray]:
        """One entry per (instance, document piece): row (index into `instances`), file (index
        into self.files), doc (number within the file), token_start, token_end (within the
        document). `stages`: each instance's data stage (default: all stage 0)."""
        fidx, local = self._place(instances, stages)
        seq = self.data.sequence_length
        parts: dict[str, list[np.ndarray]] = {
            k: [] for k in ("row", "file", "doc", "token_start", "token_end")
        }
        for k in np.unique(fidx):
            f = self.files[int(k)]
            rows = np.flatnonzero(fidx == k)
            a = local[rows] * seq
            b = a + seq
            ends = files.document_ends(f, self.data)
            starts = np.concatenate([[0], ends[:-1]])
            d0 = np.searchsorted(ends, a, side="right")
            d1 = np.searchsorted(ends, b - 1, side="right")
            count = d1 - d0 + 1
            row = np.repeat(rows, count)
            first = np.repeat(d0, count)
            offset = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
            doc = first + offset
            lo = np.maximum(np.repeat(a, count), starts[doc])
            hi = np.minimum(np.repeat(b, count), ends[doc])
            parts["row"].append(row)
            parts["file"].append(np.full(len(row), k, dtype=np.int64))
            parts["doc"].append(doc)
            parts["token_start"].append(lo - starts[doc])
            parts["token_end"].append(hi - starts[doc])
        out = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in parts.items()}
        order_ = np.lexsort((out["token_start"], out["doc"], out["file"], out["row"]))
        return {k: v[order_] for k, v in out.items()}

    def _doc_ids(self, file_idx: np.ndarray, doc: np.ndarray) -> np.ndarray:
        in_source = np.asarray(self._file_in_source, dtype=np.int64)[file_idx]
        return (in_source << DOC_SHIFT) | doc

    def _locate(self, dataset: str, doc_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(file index, document number in the file) of a source's doc_ids; unknown ids error."""
        mine = [i for i, f in enumerate(self.files) if f.source == dataset]
        if not mine:
            raise ForensicsError(f"no dataset {dataset!r} in this run (it has {self.sources})")
        ids = np.asarray(doc_ids, dtype=np.int64)
        k = ids >> DOC_SHIFT
        doc = ids & ((1 << DOC_SHIFT) - 1)
        if len(ids) and (ids.min() < 0 or k.max() >= len(mine)):
            raise ForensicsError(f"doc_id outside the files of {dataset!r}")
        fidx = np.asarray(mine, dtype=np.int64)[k]
        for f in np.unique(fidx):
            n = len(files.document_ends(self.files[int(f)], self.data))
            if doc[fidx == f].max() >= n:
                raise ForensicsError(f"{self.files[int(f)].path}: has documents 0..{n - 1}")
        return fidx, doc

    def replay(
        self, first: int, last: int, *, text: bool = False, progress: bool = True
    ) -> pl.DataFrame:
        check_iterations(first, last, self.last_iteration, self._where)
        its = np.arange(first, last + 1, dtype=np.int64)
        with _progress(progress, 3, f"replaying iterations {first}-{last}") as advance:
            grid = self.batch_instances(its)
            advance()
            flat = grid.reshape(-1)
            stage_of = np.repeat(self.stage_of(its), self.ipb)
            seg = self.segments(flat, stage_of)
            advance()
            row = seg["row"]
            table = pl.DataFrame(
                {
                    "iteration": its[row // self.ipb],
                    "position": (row % self.ipb).astype(np.int32),
                    "sample_index": (its[row // self.ipb] - 1) * self.ipb + row % self.ipb,
                    "stage": stage_of[row].astype(np.int32),
                    "skipped": self.schedule.skipped[its[row // self.ipb]],
                    "dataset": self._names("source").gather(seg["file"]),
                    "dataset_sample": flat[row],
                    "doc_id": self._doc_ids(seg["file"], seg["doc"]),
                    "token_start": seg["token_start"],
                    "token_end": seg["token_end"],
                    FILE_FACET: self._names("path").gather(seg["file"]),
                },
                schema_overrides={"dataset": pl.Utf8, FILE_FACET: pl.Utf8},
            )
            for name, values in self._meta_columns(seg["file"], seg["doc"]).items():
                table = table.with_columns(pl.Series(name, values, dtype=pl.Utf8))
            columns = [*REPLAY_KEY_COLUMNS, "skipped", *self.facets]
            if text:
                texts = self._decode(seg)
                table = table.with_columns(pl.Series("text", texts, dtype=pl.Utf8))
                columns.append("text")
            table = table.with_columns(pl.lit(True).alias("exact"))
            columns.append("exact")
            if self.data.instance_filter is not None:
                masked = self.instance_mask(flat, stage_of)
                table = table.with_columns(pl.Series(MASK_COLUMN, masked[row], dtype=pl.Boolean))
                columns.append(MASK_COLUMN)
            advance()
        return table.select(columns)

    def _names(self, attribute: str) -> pl.Series:
        """A string attribute of every token file, to gather by file index."""
        return pl.Series([str(getattr(f, attribute)) for f in self.files], dtype=pl.Utf8)

    def _flagged_instances(self, docs: pl.DataFrame, stage: Stage) -> np.ndarray:
        """bool[stage dataset size]: instances that hold any token of the given documents."""
        flagged = np.zeros(stage.size, dtype=bool)
        seq = self.data.sequence_length
        first = {f.path: int(a) for f, a in zip(stage.files, stage.instance_starts, strict=True)}
        known = docs.filter(pl.col("dataset").is_in(self.sources))
        for (name,), part in known.group_by(["dataset"]):
            fidx, doc = self._locate(str(name), part["doc_id"].cast(pl.Int64).to_numpy())
            for k in np.unique(fidx):
                f = self.files[int(k)]
                if f.path not in first:  # a file this stage does not read
                    continue
                ends = files.document_ends(f, self.data)
                d = doc[fidx == k]
                starts = np.where(d > 0, ends[np.maximum(d - 1, 0)], 0)
                lo = starts // seq
                hi = np.minimum((ends[d] - 1) // seq, f.instances - 1)
                base = first[f.path]
                for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
                    if a <= b:
                        flagged[base + a : base + b + 1] = True
        return flagged

    def exposure(self, docs: pl.DataFrame, first: int, last: int) -> pl.DataFrame:
        check_iterations(first, last, self.last_iteration, self._where)
        its = np.arange(first, last + 1, dtype=np.int64)
        counts = np.zeros(len(its), dtype=np.int64)
        stage_no = self.stage_of(its)
        for k in np.unique(stage_no):
            stage = self.stages[int(k)]
            flagged = self._flagged_instances(docs, stage)
            in_stage = np.flatnonzero(stage_no == k)
            epochs, batches = stage.location(its[in_stage])
            for e in np.unique(epochs):
                per_batch = flagged[self._grid(stage, int(e))].sum(axis=1)
                sel = epochs == e
                counts[in_stage[sel]] = per_batch[batches[sel]]
        return pl.DataFrame(
            {
                "iteration": its,
                "samples": np.full(len(its), self.ipb, dtype=np.int64),
                "flagged_samples": counts,
            }
        )

    def blend_shares(self, stage: int) -> tuple[dict[str, float], str]:
        """Each source's share of data stage `stage`'s instances: OLMo-core has no mixture
        weights; its permutation is uniform over the concatenated sources' instances."""
        counts: dict[str, int] = {}
        for f in self.stages[stage].files:
            counts[f.source] = counts.get(f.source, 0) + f.instances
        total = max(sum(counts.values()), 1)
        return {name: n / total for name, n in counts.items()}, "sources' sizes"

    def facet_shares(self, facet: str) -> pl.DataFrame | None:
        """dataset, key, share: each token file's share of its source's instances (facet
        "file"; a source keeps its paths in every stage); None for the other facets."""
        if facet != FILE_FACET:
            return None
        table = pl.DataFrame(
            {
                "dataset": self._names("source"),
                "key": self._names("path"),
                "n": [f.instances for f in self.files],
            }
        )
        share = pl.col("n") / pl.col("n").sum().over("dataset")
        return table.select("dataset", "key", share.cast(pl.Float64).alias("share"))

    def fingerprint(self) -> dict[str, Any]:
        return {
            "format": "olmo-core",
            "config_hash": self.config.config_hash(),
            "order_hash": self.config.order_hash(),
            "olmo_core_fingerprints": [
                files.olmo_fingerprint(st.files, self.data) for st in self.stages
            ],
            "files": [{"file": str(f.path), "size": f.size} for f in self.files],
        }
