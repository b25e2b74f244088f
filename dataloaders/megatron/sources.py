"""One data stage's datasets, sized and indexed as megatron-core's builder does it.

`BlendedMegatronDatasetBuilder` owns "which datasets, how many samples each"; so does `Stage`
here. For a stage's blend and the run's N training samples (train_samples, or train_iters *
global_batch_size):

- one prefix without a weight: a plain GPTDataset of N samples; global sample s is its sample s.
- weights given (for all prefixes, as Megatron requires): GPTDataset k is built for
  ceil(ceil(N * w_k) * (1 + surplus)) samples, the BlendedDataset for sum_k ceil(N * w_k).
- several prefixes without weights: GPTDatasets of one epoch each (num_samples None), blended with
  their lengths as weights, size min(N, sum of lengths).

Arrays come from Megatron's cache when it holds them (checked field by field), else from ours,
else they are built (see gpt_indices.py and blending.py).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from dataloaders.errors import ForensicsError
from dataloaders.megatron import cache
from dataloaders.megatron.blending import (
    build_blending_indices,
    normalize,
    sizes_per_dataset,
)
from dataloaders.megatron.cache import find_megatron_blend, find_megatron_gpt
from dataloaders.megatron.config import DataStage, MegatronData
from dataloaders.megatron.gpt_indices import (
    build_document_index,
    build_shuffle_index,
    document_ends,
    plan_epochs,
    sample_index_dtype,
    sample_starts,
    split_matrix,
    split_range,
)
from dataloaders.megatron.indexed import IndexedDataset

SPLIT_NAMES = ("train", "valid", "test")


def index_memory_limit() -> int:
    """Bytes the indices of one dataset may take: $FORENSICS_MAX_INDEX_BYTES, else a quarter of
    this machine's memory (a replay shares the machine with the scoring and embedding after it)."""
    env = os.environ.get("FORENSICS_MAX_INDEX_BYTES")
    if env:
        return int(env)
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def check_index_size(source: GPTSource, tokens: int, epochs: int, samples: int) -> None:
    """Refuse sizes that cannot be a real run before allocating for them: a sample longer than
    the whole split (a seq_length typed with extra zeros), or indices larger than the memory
    limit (the document index, its cumulative ends, the shuffle index: 12 B per document per
    epoch and 8 B per sample)."""
    if tokens and source.seq_length > tokens:
        raise ForensicsError(
            f"{source.prefix}: seq_length {source.seq_length:,} is longer than all "
            f"{tokens:,} tokens of {source.name}'s {source.split_name} split; check seq_length"
        )
    need = 12 * epochs * len(source.documents) + 8 * samples
    limit = index_memory_limit()
    if need > limit:
        raise ForensicsError(
            f"{source.prefix}: the run asks {source.name} for {samples:,} samples "
            f"({epochs:,} epochs), whose indices would take {need / 2**30:.1f} GiB (limit "
            f"{limit / 2**30:.1f} GiB); check seq_length, global_batch_size and train_iters, "
            "or raise FORENSICS_MAX_INDEX_BYTES"
        )


class GPTSource:
    """The train-split (or another split's) GPTDataset of one prefix in one stage.

    document_index  int32[E * D]  (see gpt_indices.py)
    shuffle_index   uint32[n]     dataset sample -> sample_index row
    sample_index    [n + 1, 2]    loaded from a cache, or None: rows are then computed on demand
                                  from `ends` (int64[E * D + 1], tokens before each position)
    """

    def __init__(
        self,
        name: str,
        prefix: Path,
        dataset: IndexedDataset,
        num_samples: int | None,
        data: MegatronData,
        split_index: int = 0,
    ) -> None:
        self.name = name
        self.split_name = SPLIT_NAMES[split_index]
        self.prefix = prefix
        self.dataset = dataset
        self.num_samples = num_samples
        self.seq_length = data.seq_length
        self.extra = int(data.add_extra_token)
        self.seed = data.seed
        span = split_range(data.split, len(dataset), split_index)
        beg, end = span if span is not None else (0, 0)
        # Megatron asks for num_samples * L + extra tokens: even 0 samples of an empty split hang.
        if end <= beg and (num_samples is None or num_samples * data.seq_length + self.extra > 0):
            raise ForensicsError(
                f"{dataset.idx_file}: the {self.split_name} split {data.split!r} leaves no "
                f"documents of "
                f"{len(dataset)}, but the run draws samples from it (Megatron would hang)"
            )
        self.documents = np.arange(beg, end, dtype=np.int32)
        self.description: dict[str, Any] = {
            "class": "GPTDataset",
            "dataset_path": str(prefix),
            "num_samples": num_samples,
            "index_split": self.split_name,
            "random_seed": data.seed,
            "sequence_length": data.seq_length,
            "split": data.split,
            "split_matrix": [list(b) if b is not None else None for b in split_matrix(data.split)],
        }
        self.own_key = cache.cache_key(
            {
                **self.description,
                "add_extra_token": self.extra,
                "idx_sha256": dataset.idx_digest(),
                "bin": dataset.bin_size,
            }
        )
        self.origin = "built"
        self._ends: np.ndarray | None = None
        self.sample_index: np.ndarray | None = None
        arrays = self._cached_arrays(data)
        if arrays is not None:
            self.document_index = arrays["document_index"]
            self.sample_index = arrays["sample_index"]
            self.shuffle_index = arrays["shuffle_index"]
        else:
            self._build()

    def _cached_arrays(self, data: MegatronData) -> dict[str, np.ndarray] | None:
        """Megatron's cached indices for this dataset (range-checked: a damaged entry is an
        error naming it), else our own cache's (a damaged entry is rebuilt), else None."""
        documents = len(self.dataset)
        strict = data.cache_path is not None
        megatron = (  # lazily: the first folder holding an entry serves
            (
                folder,
                find_megatron_gpt(
                    folder, self.prefix, self.description, self.split_name, strict=strict
                ),
            )
            for folder in self._megatron_cache_dirs(data)
        )
        arrays, self.origin = cache.find_indices(
            megatron,
            lambda found: cache.gpt_arrays_problem(found, documents),
            lambda folder, problem: (
                f"{folder}: Megatron's cached indices for {self.prefix.name} are damaged "
                f"({problem}); delete its *-GPTDataset-{self.split_name}-* files and they "
                "are rebuilt"
            ),
            ("gpt", self.own_key, cache.GPT_FILES),
        )
        return arrays

    def _megatron_cache_dirs(self, data: MegatronData) -> list[Path]:
        """--data-cache-path, else Megatron's default `<prefix>/cache/GPTDataset_indices`."""
        if data.cache_path is not None:
            return [data.cache_path]
        return [Path(f"{self.prefix}") / "cache" / "GPTDataset_indices"]

    def _build(self) -> None:
        sizes = self.dataset.sequence_lengths
        tokens = int(np.sum(sizes[self.documents], dtype=np.int64))
        plan = plan_epochs(tokens, self.num_samples, self.seq_length, self.extra)
        check_index_size(self, tokens, plan.num_epochs, plan.num_samples_total)
        rng = np.random.RandomState(self.seed)
        self.document_index = build_document_index(
            self.documents, plan.num_epochs, rng, plan.separate_final_epoch
        )
        n = plan.num_samples_total
        first = plan.num_samples_sans_final_epoch if plan.separate_final_epoch else n
        self.shuffle_index = build_shuffle_index(first, n, rng)
        self._n = n
        # Every replay of a built source reads sample starts from these token sums; computing
        # them here puts them on the source's own thread (see _build_sources).
        self._ends = document_ends(sizes, self.document_index)

    @property
    def ends(self) -> np.ndarray:
        if self._ends is None:
            self._ends = document_ends(self.dataset.sequence_lengths, self.document_index)
        return self._ends

    def __len__(self) -> int:
        """Samples in this GPTDataset (Megatron's len)."""
        if self.sample_index is not None:
            return int(self.sample_index.shape[0]) - 1
        return self._n

    def rows(self, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """sample_index rows j: (position in document_index, token offset), int64."""
        if self.sample_index is not None:
            got = np.asarray(self.sample_index[j], dtype=np.int64)
            return got[:, 0], got[:, 1]
        return sample_starts(
            self.ends,
            j,
            self.seq_length,
            self.extra,
            self.dataset.sequence_lengths,
            self.document_index,
        )

    def full_sample_index(self) -> np.ndarray:
        """The whole sample_index, as Megatron would hold it."""
        if self.sample_index is not None:
            return self.sample_index
        pos, off = self.rows(np.arange(len(self) + 1))
        sizes = self.dataset.sequence_lengths
        dtype = sample_index_dtype(len(self.document_index), int(sizes.max()) if len(sizes) else 0)
        out = np.empty((len(self) + 1, 2), dtype=dtype)
        out[:, 0], out[:, 1] = pos, off
        return out

    def save_cache(self) -> None:
        if self.origin != "built":
            return
        arrays = {
            "document_index": self.document_index,
            "sample_index": self.full_sample_index(),
            "shuffle_index": self.shuffle_index,
        }
        cache.save_own("gpt", self.own_key, arrays, self.description)


def _build_sources(
    specs: list[tuple[str, Path, IndexedDataset, int | None]], data: MegatronData
) -> list[GPTSource]:
    """The blend's GPTSources, built side by side: their shuffles and token sums release the GIL.

    Megatron builds them one after another; the arrays do not depend on the order. The first
    failing source (in blend order) raises, as it would have sequentially.
    """
    if len(specs) < 2:
        return [GPTSource(n, prefix, ds, size, data) for n, prefix, ds, size in specs]
    workers = min(len(specs), os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gpt-source") as pool:
        futures = [
            pool.submit(GPTSource, n, prefix, ds, size, data) for n, prefix, ds, size in specs
        ]
        return [f.result() for f in futures]


class Stage:
    """A data stage: its GPTSources and the blend over them."""

    def __init__(
        self,
        index: int,
        stage: DataStage,
        data: MegatronData,
        total_samples: int,
        datasets: dict[Path, IndexedDataset],
    ) -> None:
        self.index = index
        self.start_iteration = stage.start_iteration
        self.total_samples = total_samples
        specs = stage.blend
        weighted = ["weight" in s.model_fields_set for s in specs]
        if any(weighted) and not all(weighted):
            raise ForensicsError(
                f"data stage {index}: give a weight for every dataset of the blend or for none "
                "(Megatron's --data-path takes weights for all prefixes or none)"
            )
        names = [s.display_name for s in specs]
        self.blended = not (len(specs) == 1 and not weighted[0])
        self.origin = "built"
        if not self.blended:
            self.sources = [
                GPTSource(names[0], specs[0].prefix, datasets[specs[0].prefix], total_samples, data)
            ]
            self.size = total_samples
            self.weights: list[float] = [1.0]
            self.dataset_index: np.ndarray | None = None
            self.dataset_sample_index: np.ndarray | None = None
            return
        if all(weighted):
            w = normalize([s.weight for s in specs])
            target = sizes_per_dataset(w, total_samples)
            buffer = sizes_per_dataset(w, total_samples, data.mid_level_dataset_surplus)
            self.sources = _build_sources(
                [
                    (n, s.prefix, datasets[s.prefix], b)
                    for n, s, b in zip(names, specs, buffer, strict=True)
                ],
                data,
            )
            self.size = sum(target)
            self.weights = normalize(w)
        else:
            self.sources = _build_sources(
                [
                    (n, s.prefix, datasets[s.prefix], None)
                    for n, s in zip(names, specs, strict=True)
                ],
                data,
            )
            lengths = [len(src) for src in self.sources]
            self.size = min(total_samples, sum(lengths))
            self.weights = normalize(lengths)
        self.description = {
            "class": "BlendedDataset",
            "datasets": [src.description for src in self.sources],
            "split": "train",
            "weights": self.weights,
            "size": self.size,
        }
        self.own_key = cache.cache_key(
            {**self.description, "sources": [src.own_key for src in self.sources]}
        )
        arrays = self._cached_blend(data, [s.prefix for s in specs])
        self.dataset_index = arrays["dataset_index"] if arrays else None
        self.dataset_sample_index = arrays["dataset_sample_index"] if arrays else None
        if arrays is not None and len(self.dataset_index) != self.size:
            raise ForensicsError(
                f"{self.sources[0].prefix}: cached blend has {len(self.dataset_index)} samples, "
                f"expected {self.size}"
            )

    def _cached_blend(self, data: MegatronData, prefixes: list[Path]) -> dict[str, Any] | None:
        """Megatron's cached blend indices (range-checked: damaged is an error naming the
        folder), else our own cache's (damaged is rebuilt), else None."""
        lengths = [len(x) for x in self.sources]
        folder = data.cache_path
        megatron = (
            []
            if folder is None
            else [(folder, find_megatron_blend(folder, prefixes, self.description))]
        )
        arrays, self.origin = cache.find_indices(
            megatron,
            lambda found: cache.blend_arrays_problem(found, lengths),
            lambda folder, problem: (
                f"{folder}: Megatron's cached blend indices are damaged ({problem}); delete its "
                "*-BlendedDataset-train-* files and they are rebuilt"
            ),
            ("blend", self.own_key, cache.BLEND_FILES),
        )
        return arrays

    def _ensure_blend(self, stop: int) -> None:
        """Blend arrays at least up to sample `stop` (a prefix is exact: see blending.py)."""
        have = 0 if self.dataset_index is None else len(self.dataset_index)
        if have >= stop:
            return
        self.dataset_index, self.dataset_sample_index = build_blending_indices(
            self.weights, self.size, stop
        )
        self._check_oversampling()

    def _check_oversampling(self) -> None:
        """Megatron raises when the blend draws more samples from a dataset than it has."""
        assert self.dataset_index is not None
        # dataset_sample_index is a running count per dataset: its max for k is count_k - 1.
        counts = np.bincount(np.asarray(self.dataset_index), minlength=len(self.sources))
        for k, src in enumerate(self.sources):
            if counts[k] > len(src):
                raise ForensicsError(
                    f"{src.prefix}: the blend draws {int(counts[k])} samples from {src.name}, "
                    f"which has {len(src)} (Megatron raises here; raise "
                    "mid_level_dataset_surplus)"
                )

    def lookup(self, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Global samples -> (dataset k int16, sample within dataset int64)."""
        if len(samples) == 0:
            return np.zeros(0, np.int16), np.zeros(0, np.int64)
        top = int(samples.max())
        if top >= self.size:
            raise ForensicsError(
                f"global sample {top} is beyond the {self.size} samples the run's train dataset "
                f"holds (data stage {self.index})"
            )
        if not self.blended:
            if top >= len(self.sources[0]):
                raise ForensicsError(f"{self.sources[0].prefix}: sample {top} beyond the dataset")
            return np.zeros(len(samples), np.int16), samples.astype(np.int64)
        self._ensure_blend(top + 1)
        assert self.dataset_index is not None and self.dataset_sample_index is not None
        return (
            np.asarray(self.dataset_index[samples]),
            np.asarray(self.dataset_sample_index[samples]),
        )

    def slice(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """Global samples [lo, hi) -> (dataset k, sample within dataset), by slicing."""
        if hi > self.size:
            raise ForensicsError(
                f"global sample {hi - 1} is beyond the {self.size} samples the run's train "
                f"dataset holds (data stage {self.index})"
            )
        if not self.blended:
            if hi > len(self.sources[0]):
                raise ForensicsError(
                    f"{self.sources[0].prefix}: sample {hi - 1} beyond the dataset"
                )
            return np.zeros(hi - lo, np.int16), np.arange(lo, hi, dtype=np.int64)
        self._ensure_blend(hi)
        assert self.dataset_index is not None and self.dataset_sample_index is not None
        return (
            np.asarray(self.dataset_index[lo:hi]),
            np.asarray(self.dataset_sample_index[lo:hi]),
        )

    def save_cache(self) -> None:
        for src in self.sources:
            src.save_cache()
        if self.blended and self.origin == "built":
            if self.dataset_index is None or len(self.dataset_index) < self.size:
                self.dataset_index, self.dataset_sample_index = build_blending_indices(
                    self.weights, self.size
                )
                self._check_oversampling()
            arrays = {
                "dataset_index": self.dataset_index,
                "dataset_sample_index": self.dataset_sample_index,
            }
            cache.save_own("blend", self.own_key, arrays, self.description)
