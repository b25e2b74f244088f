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
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dataloaders.base import REPLAY_KEY_COLUMNS
from dataloaders.olmo_core import cache, files, order
from dataloaders.olmo_core.repetition import masked_instances
from forensics.errors import ForensicsError

FILE_FACET = "file"
MASK_COLUMN = "instance_masked"
DOC_SHIFT = 40  # doc_id = file_in_source << 40 | document number in the file


@contextmanager
def _progress(enabled: bool, total: int, label: str) -> Iterator[Any]:
    """A rich progress bar on stderr (a no-op callable when disabled)."""
    if not enabled:
        yield lambda n=1: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n=1: bar.advance(task, n)


class OlmoCoreReplayer:
    """Replays an OLMo-core NumpyFSLDataset / NumpyFSLDataLoader run from its RunConfig."""

    def __init__(self, config: Any):
        self.config = config
        self.data = data = config.data
        self._where = f"{config.source}: " if config.source else ""
        training = config.training
        self.ipb = data.instances_per_batch
        if training.global_batch_size != self.ipb:
            raise ForensicsError(
                f"{self._where}training.global_batch_size {training.global_batch_size} != "
                f"data.global_batch_size / data.sequence_length = {self.ipb} instances"
            )
        if training.resumes:
            raise ForensicsError(f"{self._where}olmo-core runs give restarts in data.resumes")
        if training.rampup_batch_size is not None:
            raise ForensicsError(f"{self._where}rampup_batch_size is not supported for olmo-core")
        self.files = files.open_token_files(data, self._where)
        self.size = self.files[-1].first_instance + self.files[-1].instances
        target = data.max_target_sequence_length
        self.chunk = target // data.sequence_length if target is not None else 1
        self.batches_per_epoch = self.size // self.ipb
        if self.batches_per_epoch == 0:
            raise ForensicsError(
                f"{self._where}the token files hold {self.size} instances, fewer than one "
                f"global batch of {self.ipb}"
            )
        self.sources = [s.name for s in data.sources]
        self._file_in_source: list[int] = []
        seen: dict[str, int] = {}
        for f in self.files:
            self._file_in_source.append(seen.get(f.source, 0))
            seen[f.source] = seen.get(f.source, 0) + 1
        self._instance_starts = np.asarray([f.first_instance for f in self.files], dtype=np.int64)
        self._epochs: dict[int, np.ndarray] = {}
        for resume in data.resumes:
            self._check_resume(resume)

    # ------------------------------------------------------------------ order

    @cached_property
    def olmo_fingerprint(self) -> str:
        """The dataset fingerprint OLMo-core stores in its data-loader state."""
        return files.olmo_fingerprint(self.files, self.data)

    def global_indices(self, epoch: int) -> np.ndarray:
        """The epoch's instance permutation: the run's saved file when present, else rebuilt."""
        if epoch not in self._epochs:
            data = self.data
            name = order.global_indices_name(
                seed=data.seed,
                epoch=epoch,
                dataset_size=self.size,
                chunk=self.chunk,
                shuffle=data.shuffle,
            )
            saved = data.work_dir / name if data.work_dir is not None else None
            if saved is not None and saved.is_file():
                indices = order.saved_global_indices(saved, self.size)
            else:
                indices = cache.load_indices(name)
                if indices is None or len(indices) != self.size:
                    indices = order.build_global_indices(
                        self.size,
                        seed=data.seed,
                        epoch=epoch,
                        chunk=self.chunk,
                        shuffle=data.shuffle,
                    )
                    cache.save_indices(name, indices)
            self._epochs[epoch] = indices
        return self._epochs[epoch]

    def batch_instances(self, iterations: np.ndarray) -> np.ndarray:
        """(len(iterations), ipb) global instance indices, columns in position order."""
        its = np.asarray(iterations, dtype=np.int64)
        epochs, batches = order.step_location(its, self.batches_per_epoch)
        cols = order.position_columns(self.ipb, self.data.dp_world_size)
        out = np.empty((len(its), self.ipb), dtype=np.int64)
        for e in np.unique(epochs):
            rows = self.global_indices(int(e))[: self.batches_per_epoch * self.ipb]
            grid = rows.reshape(self.batches_per_epoch, self.ipb)
            sel = epochs == e
            out[sel] = grid[batches[sel]][:, cols]
        return out

    def _check_resume(self, resume: Any) -> None:
        """A restart's data-loader state must be this config's (seed, fingerprint, position)."""
        state = load_state(resume.state)
        where = f"{resume.state}"
        want = {
            "dataset_type": "fsl",
            "seed": self.data.seed,
            "dataset_fingerprint_version": files.FINGERPRINT_VERSION,
            "dataset_fingerprint": self.olmo_fingerprint,
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
        done = (int(state["epoch"]) - 1) * self.batches_per_epoch + batches
        if done != resume.iteration - 1:
            raise ForensicsError(
                f"{where}: the state resumes after {done} steps (epoch {state['epoch']}, "
                f"{batches} batches), but data.resumes says iteration {resume.iteration}"
            )

    # ------------------------------------------------------------------ the protocol

    @property
    def last_iteration(self) -> int:
        training = self.config.training
        if training.train_iters is not None:
            return int(training.train_iters)
        return int(training.train_samples // self.ipb)

    @property
    def facets(self) -> list[str]:
        return [FILE_FACET, *self._meta_fields]

    @cached_property
    def _meta_fields(self) -> list[str]:
        if any(f.metadata is not None for f in self.files):
            return [m for m in self.data.metadata_fields if m != FILE_FACET]
        return []

    def _check_window(self, first: int, last: int) -> None:
        end = self.last_iteration
        if first < 1 or last < first or last > end:
            raise ForensicsError(
                f"{self._where}iterations {first}..{last} outside the run's 1..{end}"
            )

    def iteration_samples(self, first: int, last: int) -> pl.DataFrame:
        self._check_window(first, last)
        it = np.arange(first, last + 1, dtype=np.int64)
        return pl.DataFrame(
            {
                "iteration": it,
                "first_sample": (it - 1) * self.ipb,
                "end_sample": it * self.ipb,
                "stage": np.zeros(len(it), dtype=np.int32),
            }
        )

    def _file_of(self, instances: np.ndarray) -> np.ndarray:
        return np.searchsorted(self._instance_starts, instances, side="right") - 1

    def segments(self, instances: np.ndarray) -> dict[str, np.ndarray]:
        """One entry per (instance, document piece): row (index into `instances`), file, doc
        (number within the file), token_start, token_end (within the document)."""
        inst = np.asarray(instances, dtype=np.int64)
        fidx = self._file_of(inst)
        seq = self.data.sequence_length
        parts: dict[str, list[np.ndarray]] = {
            k: [] for k in ("row", "file", "doc", "token_start", "token_end")
        }
        for k in np.unique(fidx):
            f = self.files[int(k)]
            rows = np.flatnonzero(fidx == k)
            a = (inst[rows] - f.first_instance) * seq
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
        self._check_window(first, last)
        its = np.arange(first, last + 1, dtype=np.int64)
        with _progress(progress, 3, f"replaying iterations {first}-{last}") as advance:
            grid = self.batch_instances(its)
            advance()
            flat = grid.reshape(-1)
            seg = self.segments(flat)
            advance()
            row = seg["row"]
            table = pl.DataFrame(
                {
                    "iteration": its[row // self.ipb],
                    "position": (row % self.ipb).astype(np.int32),
                    "sample_index": (its[row // self.ipb] - 1) * self.ipb + row % self.ipb,
                    "stage": np.zeros(len(row), dtype=np.int32),
                    "dataset": [self.files[int(k)].source for k in seg["file"]]
                    if len(row)
                    else pl.Series([], dtype=pl.Utf8),
                    "dataset_sample": flat[row],
                    "doc_id": self._doc_ids(seg["file"], seg["doc"]),
                    "token_start": seg["token_start"],
                    "token_end": seg["token_end"],
                    FILE_FACET: [str(self.files[int(k)].path) for k in seg["file"]]
                    if len(row)
                    else pl.Series([], dtype=pl.Utf8),
                },
                schema_overrides={"dataset": pl.Utf8, FILE_FACET: pl.Utf8},
            )
            for name, values in self._meta_columns(seg["file"], seg["doc"]).items():
                table = table.with_columns(pl.Series(name, values, dtype=pl.Utf8))
            columns = [*REPLAY_KEY_COLUMNS, *self.facets]
            if text:
                texts = self._decode(seg)
                table = table.with_columns(pl.Series("text", texts, dtype=pl.Utf8))
                columns.append("text")
            table = table.with_columns(pl.lit(True).alias("exact"))
            columns.append("exact")
            if self.data.instance_filter is not None:
                masked = self.instance_mask(flat)
                table = table.with_columns(pl.Series(MASK_COLUMN, masked[row], dtype=pl.Boolean))
                columns.append(MASK_COLUMN)
            advance()
        return table.select(columns)

    def instance_mask(self, instances: np.ndarray, block: int = 256) -> np.ndarray:
        """True where OLMo-core's instance filter masked the instance out of the loss."""
        flt = self.data.instance_filter
        assert flt is not None
        inst = np.asarray(instances, dtype=np.int64)
        out = np.zeros(len(inst), dtype=bool)
        for lo in range(0, len(inst), block):
            part = inst[lo : lo + block]
            tokens = np.stack([self._instance_tokens(int(i)) for i in part])
            out[lo : lo + block] = masked_instances(
                tokens,
                max_period=flt.repetition_max_period,
                min_period=flt.repetition_min_period,
                max_count=flt.repetition_max_count,
            )
        return out

    def _instance_tokens(self, instance: int) -> np.ndarray:
        f = self.files[int(self._file_of(np.asarray([instance]))[0])]
        start = (instance - f.first_instance) * self.data.sequence_length
        return files.read_tokens(f, start, start + self.data.sequence_length, self.data)

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
        from forensics.tokenizer import load_tokenizer

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
            ids.append(files.read_tokens(self.files[k], start + a, start + b, self.data).tolist())
        return self._tokenizer.decode_batch(ids, skip_special_tokens=False) if ids else []

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

    def _flagged_instances(self, docs: pl.DataFrame) -> np.ndarray:
        """bool[dataset size]: instances that hold any token of the given documents."""
        flagged = np.zeros(self.size, dtype=bool)
        seq = self.data.sequence_length
        known = docs.filter(pl.col("dataset").is_in(self.sources))
        for (name,), part in known.group_by(["dataset"]):
            fidx, doc = self._locate(str(name), part["doc_id"].cast(pl.Int64).to_numpy())
            for k in np.unique(fidx):
                f = self.files[int(k)]
                ends = files.document_ends(f, self.data)
                d = doc[fidx == k]
                starts = np.where(d > 0, ends[np.maximum(d - 1, 0)], 0)
                lo = starts // seq
                hi = np.minimum((ends[d] - 1) // seq, f.instances - 1)
                for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
                    if a <= b:
                        flagged[f.first_instance + a : f.first_instance + b + 1] = True
        return flagged

    def exposure(self, docs: pl.DataFrame, first: int, last: int) -> pl.DataFrame:
        self._check_window(first, last)
        flagged = self._flagged_instances(docs)
        its = np.arange(first, last + 1, dtype=np.int64)
        counts = np.zeros(len(its), dtype=np.int64)
        epochs, batches = order.step_location(its, self.batches_per_epoch)
        for e in np.unique(epochs):
            rows = self.global_indices(int(e))[: self.batches_per_epoch * self.ipb]
            per_batch = flagged[rows].reshape(self.batches_per_epoch, self.ipb).sum(axis=1)
            sel = epochs == e
            counts[sel] = per_batch[batches[sel]]
        return pl.DataFrame(
            {
                "iteration": its,
                "samples": np.full(len(its), self.ipb, dtype=np.int64),
                "flagged_samples": counts,
            }
        )

    def fingerprint(self) -> dict[str, Any]:
        return {
            "format": "olmo-core",
            "config_hash": self.config.config_hash(),
            "olmo_core_fingerprint": self.olmo_fingerprint,
            "files": [{"file": str(f.path), "size": f.size} for f in self.files],
        }


def load_state(path: Path) -> dict[str, Any]:
    """A data-loader state: JSON of `state_dict()`, or the trainer's `train/rank0.pt` (its
    "data_loader" entry). Anything else is a one-line error."""
    path = Path(path)
    if not path.is_file():
        raise ForensicsError(f"{path}: data-loader state not found")
    if path.suffix == ".json":
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as err:
            raise ForensicsError(f"{path}: not valid JSON ({err})") from None
    else:
        try:
            import torch

            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - any unreadable checkpoint is bad input
            raise ForensicsError(f"{path}: unreadable trainer state ({err})") from None
    if isinstance(state, dict) and isinstance(state.get("data_loader"), dict):
        state = state["data_loader"]
    if not isinstance(state, dict):
        raise ForensicsError(f"{path}: expected a data-loader state mapping")
    return state
