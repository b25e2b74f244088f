"""What every replayed dataloader offers the pipeline, whatever library the training job used.

The replay table (one row per iteration x position in the global batch x document segment) is the
contract between replay and everything downstream. Its columns:

    iteration       Int64   1-indexed training iteration that consumed the sample
    position        Int32   position of the sample in the iteration's global batch, 0..gbs-1
    sample_index    Int64   global sample index (= consumed samples before this sample)
    stage           Int32   index of the data stage (blend) in force, 0-based
    skipped         Boolean the step drew the sample but an earlier restart's skip flag kept it
                            from training (Megatron runs with training.applied_skips)
    dataset         Utf8    dataset name in the blend
    dataset_sample  Int64   the sample's index inside that dataset (Megatron: dataset_sample_index)
    doc_id          Int64   document number in the dataset (Megatron: .idx document order)
    token_start     Int64   first token of the document used by this segment (within the document)
    token_end       Int64   one past the last token used (within the document)
    <facets>        Utf8    the dataset's provenance manifest columns (source, crawl_batch, url ...)
    text            Utf8    the decoded segment (only when asked for)
    exact           Boolean False when the replay is best-effort (e.g. a resumed streaming run)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import polars as pl

from dataloaders.errors import ForensicsError

REPLAY_KEY_COLUMNS = [
    "iteration",
    "position",
    "sample_index",
    "stage",
    "dataset",
    "dataset_sample",
    "doc_id",
    "token_start",
    "token_end",
]

# Names a manifest (or any provenance facet) may not take: they would replace the replay's own.
RESERVED_COLUMNS = frozenset([*REPLAY_KEY_COLUMNS, "skipped", "text", "exact"])


def check_iterations(first: int, last: int, last_iteration: int, where: str = "") -> None:
    """The window check, for every family and the CLI: iterations first..last (inclusive) must be
    a non-empty range inside the run's 1..last_iteration. `where` starts the message (the config
    file, or the CLI flags that made the range)."""
    if first < 1:
        raise ForensicsError(
            f"{where}iteration {first} is outside the run: before iteration 1 (iterations are "
            "1-indexed)"
        )
    if last > last_iteration:
        raise ForensicsError(
            f"{where}iteration {last} is outside the run: beyond the end of training (last "
            f"iteration {last_iteration})"
        )
    if last < first:
        raise ForensicsError(f"{where}empty iteration range {first}..{last}")


def fixed_batch_samples(
    first: int,
    last: int,
    batch_size: int,
    last_iteration: int,
    where: str = "",
    stage_of: Callable[[np.ndarray], np.ndarray] | None = None,
) -> pl.DataFrame:
    """`Replayer.iteration_samples` for a run whose every iteration draws `batch_size` samples
    (iteration i: samples [(i - 1) * batch_size, i * batch_size)), the range checked first
    (`check_iterations`). `stage_of`: iterations -> their data stage (None: stage 0
    throughout)."""
    check_iterations(first, last, last_iteration, where)
    it = np.arange(first, last + 1, dtype=np.int64)
    stage = np.zeros(len(it), dtype=np.int32) if stage_of is None else stage_of(it)
    return pl.DataFrame(
        {
            "iteration": it,
            "first_sample": (it - 1) * batch_size,
            "end_sample": it * batch_size,
            "stage": np.asarray(stage).astype(np.int32),
        }
    )


def round_robin(per_worker: list[list[Any]]) -> list[Any]:
    """The order a torch DataLoader with workers yields their batches: batch k of worker 0, 1,
    ..., W-1, then batch k+1 of each; a worker that is exhausted drops out of the cycle
    (torch/utils/data/dataloader.py, _MultiProcessingDataLoaderIter). Used by the families whose
    runs read through a DataLoader (hf, mosaic)."""
    out: list[Any] = []
    depth = max((len(b) for b in per_worker), default=0)
    for k in range(depth):
        for batches in per_worker:
            if k < len(batches):
                out.append(batches[k])
    return out


class Replayer(ABC):
    """A training job's data order, reconstructed from its config: the base of every family's
    replayer (each family's `Family.open` returns one).

    The abstract methods are what every family answers. The rest are capabilities a family may
    have, declared here with their default so that callers ask instead of probing:

    - `token_files`: the data are Megatron .bin/.idx token files, reachable as `specs` (name ->
      dataset spec), `datasets` (prefix -> IndexedDataset), `tokenizer()` and `vocab_size()`
      (the tokenizer's ids, added tokens included); token export, rescoring, the scan and the
      tokenizer check read them.
    - `index_cache`: `save_cache()` writes index arrays worth keeping for the next replay.
    - `instance_samples`: a sample is one fixed-size dataset instance (OLMo-core), readable
      whole as `instance_tokens(stage_index, dataset_sample)` with its data `stages`; rescoring
      reads each sample's tokens that way.
    - `document_token_ids`: `document_tokens(docs) -> [token ids of each whole document]`, what
      the repeated n-gram rule reads (`forensics spike`).
    - `mixture_weights`: `blend_shares(stage) -> ({dataset: share of the stage's samples},
      basis)`, the mixture weights the config gives data stage `stage` (0-based, the replay
      table's `stage`) and a word on where they come from ("blend", "stream weights", "sources'
      sizes"). Without them a family has no expected shares.
    - `facet_shares(facet) -> DataFrame(dataset, key, share) | None`: each facet value's share
      of its dataset's samples, None when the family cannot tell (the default).

    Every replayer has a `schedule` (`dataloaders.schedule.Schedule`), the iteration -> samples
    map the skip flags are checked against, with the family's data stages and applied skips.
    """

    token_files: ClassVar[bool] = False
    index_cache: ClassVar[bool] = False
    instance_samples: ClassVar[bool] = False
    document_token_ids: ClassVar[bool] = False
    mixture_weights: ClassVar[bool] = False
    config: Any  # the RunConfig the replayer was opened with
    schedule: Any  # the run's dataloaders.schedule.Schedule (every family's replayer has one)

    @property
    @abstractmethod
    def last_iteration(self) -> int:
        """The final training iteration (end of training), 1-indexed."""

    @property
    @abstractmethod
    def facets(self) -> list[str]:
        """Provenance columns the replay table carries (from the manifests)."""

    @abstractmethod
    def iteration_samples(self, first: int, last: int) -> pl.DataFrame:
        """Iterations first..last (inclusive) -> columns iteration, first_sample, end_sample
        (half-open global sample range), stage."""

    @abstractmethod
    def replay(
        self, first: int, last: int, *, text: bool = False, progress: bool = True
    ) -> pl.DataFrame:
        """The replay table for iterations first..last (inclusive)."""

    @abstractmethod
    def documents(self, docs: pl.DataFrame, *, progress: bool = True) -> pl.DataFrame:
        """Full text of documents: `docs` has dataset, doc_id; returns them plus `text` and the
        facet columns (whole documents, not segments: scoring looks at the whole document)."""

    @abstractmethod
    def exposure(self, docs: pl.DataFrame, first: int, last: int) -> pl.DataFrame:
        """For iterations first..last: columns iteration, samples, flagged_samples (samples that
        contain at least one of `docs` (dataset, doc_id)). Vectorised: it scans to the end of
        training for the forward-exposure estimate."""

    @abstractmethod
    def documents_by_facet(self, facet: str, key: str | None) -> pl.DataFrame | None:
        """Every document of the run (dataset, doc_id) whose provenance `facet` is `key` (None:
        no value; facet "dataset": the whole dataset), drawn by a window or not. None when the
        family cannot list them without reading the whole corpus (then the block list holds
        only the documents the window drew, and the spike report says so)."""

    @abstractmethod
    def fingerprint(self) -> dict[str, Any]:
        """What a skip list made from this replay is valid for: config hash, data file sizes and
        index hashes."""

    # -- capabilities (class docstring) ---------------------------------------------------------

    def save_cache(self) -> None:
        """Keep the index arrays built so far for the next replay (`index_cache` families)."""
        return None

    def document_tokens(self, docs: pl.DataFrame) -> list[Any]:
        """Token ids (1-D numpy arrays) of whole documents (`docs`: dataset, doc_id), in the
        table's order (`document_token_ids` families)."""
        raise NotImplementedError(f"{type(self).__name__} cannot list a document's token ids")

    def blend_shares(self, stage: int) -> tuple[dict[str, float], str]:
        """The mixture weights of data stage `stage` (`mixture_weights` families)."""
        raise NotImplementedError(f"{type(self).__name__} has no mixture weights")

    def facet_shares(self, facet: str) -> pl.DataFrame | None:
        """Each value of `facet`'s share of its dataset's samples; None: not known."""
        return None


def exposure_counts(
    samples: pl.DataFrame, hits: pl.DataFrame, first: int, last: int
) -> pl.DataFrame:
    """Replayer.exposure's table from one row per sample (`samples`) and one per sample holding
    a culprit document (`hits`), both with an iteration column: every iteration first..last,
    zero where it drew nothing."""
    import numpy as np

    counts = samples.group_by("iteration").agg(pl.len().alias("samples"))
    flagged_counts = hits.group_by("iteration").agg(pl.len().alias("flagged_samples"))
    full = pl.DataFrame({"iteration": np.arange(first, last + 1, dtype=np.int64)})
    return (
        full.join(counts, on="iteration", how="left")
        .join(flagged_counts, on="iteration", how="left")
        .with_columns(pl.col("samples", "flagged_samples").fill_null(0).cast(pl.Int64))
        .sort("iteration")
    )
