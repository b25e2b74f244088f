"""The run config's `data:` section, one model per loader family (`format:` megatron, hf,
olmo-core, mosaic-streaming), and the strict base model every part of the run config uses.
`dataloaders/config.py` has the whole config (training, resumes, checkpoints) and its loading;
`configs/example-*.yaml` document every field.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from dataloaders.base import RESERVED_COLUMNS


def printable_name(value: str | None) -> str | None:
    """A name that lands in file names, YAML, report lines and shell lines: control characters
    (a newline, a tab, an escape) would inject lines or rewrite the terminal, so they are
    refused in the config."""
    if value is None:
        return value
    bad = [c for c in value if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")]
    if bad:
        raise ValueError(
            f"name {value!r} holds a control character ({bad[0]!r}): use printable characters"
        )
    return value


PrintableName = Annotated[str, AfterValidator(printable_name)]


def _is_number_type(annotation: Any) -> bool:
    """int, float, or an optional one of them (not a Literal, a str, a list of numbers)."""
    import types
    import typing

    if annotation in (int, float):
        return True
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return _is_number_type(args[0])
    if origin in (typing.Union, types.UnionType):
        real = [a for a in args if a is not type(None)]
        return bool(real) and all(a in (int, float) for a in real)
    return False


def check_resume_order(resumes: list[Any]) -> None:
    """A family's data.resumes name distinct iterations in increasing order (each restart's
    state is read in turn, from the one before it)."""
    iters = [r.iteration for r in resumes]
    if iters != sorted(set(iters)):
        raise ValueError(f"data.resumes must be in increasing iteration order, got {iters}")


class StrictModel(BaseModel):
    """Unknown keys are errors; values are not silently coerced across types (`seed: true` is
    not seed 1, `seed: "7"` not 7)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _numbers_are_numbers(cls, raw: Any) -> Any:
        if not isinstance(raw, dict):
            return raw
        for name, value in raw.items():
            field = cls.model_fields.get(name)
            numeric = field is not None and _is_number_type(field.annotation)
            if numeric and isinstance(value, bool | str):
                raise ValueError(f"{name}: expected a number, got {value!r}")
        return raw


class DatasetSpec(StrictModel):
    """One dataset of a blend: a Megatron path prefix (without .bin/.idx) and its weight."""

    prefix: Path
    weight: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    name: PrintableName | None = None
    manifest: Path | None = None  # Parquet, one row per document in .idx order (doc_id + facets)

    @property
    def display_name(self) -> str:
        return self.name or self.prefix.name


class DataStage(StrictModel):
    """A blend in force from `start_iteration` on (1-indexed).

    A mixture switch in a Megatron run is a restart with a new --data-path: the new
    BlendedDataset is built for the same number of training samples, and the loader continues at
    the consumed-samples count, i.e. global sample c is drawn from the new blend's sample c.
    """

    start_iteration: int = Field(default=1, ge=1)
    blend: list[DatasetSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> DataStage:
        names = [d.display_name for d in self.blend]
        if len(set(names)) != len(names):
            raise ValueError(f"dataset names in a blend must be unique, got {names}")
        return self


class MegatronData(StrictModel):
    """Megatron-core GPTDataset / BlendedDataset parameters (the run's --data-* arguments)."""

    format: Literal["megatron"] = "megatron"
    seed: int = Field(default=1234, ge=0, le=2**32 - 1)  # numpy RandomState's range, as Megatron
    seq_length: int = Field(gt=0)
    split: str = "969,30,1"
    add_extra_token: bool = True  # megatron-core's add_extra_token_to_sequence (default True)
    mid_level_dataset_surplus: float = 0.005
    cache_path: Path | None = None  # --data-cache-path; Megatron's own .npy indices are read here
    blend: list[DatasetSpec] | None = None  # a single blend for the whole run ...
    stages: list[DataStage] | None = None  # ... or blends that change at given iterations

    @field_validator("split")
    @classmethod
    def _split_numbers(cls, value: str) -> str:
        parts = re.findall(r"[.0-9]+", value)
        if "-" in value or not parts or len(parts) > 3 or sum(float(p) for p in parts) <= 0:
            raise ValueError(f"split must be like '969,30,1', got {value!r}")
        return value

    @model_validator(mode="after")
    def _blend_or_stages(self) -> MegatronData:
        if (self.blend is None) == (self.stages is None):
            raise ValueError("give exactly one of data.blend or data.stages")
        if self.stages is not None:
            starts = [s.start_iteration for s in self.stages]
            if starts[0] != 1 or starts != sorted(set(starts)):
                raise ValueError(
                    f"data.stages must start at iteration 1 and increase strictly, got {starts}"
                )
        if self.blend is not None:
            names = [d.display_name for d in self.blend]
            if len(set(names)) != len(names):
                raise ValueError(f"dataset names in a blend must be unique, got {names}")
        return self

    @property
    def data_stages(self) -> list[DataStage]:
        """The blend schedule, always as stages (a plain blend is one stage from iteration 1)."""
        if self.stages is not None:
            return list(self.stages)
        assert self.blend is not None
        return [DataStage(start_iteration=1, blend=self.blend)]


class ShardRecord(StrictModel):
    """A data file as the run saw it: replay refuses a shard whose size or hash changed, since a
    changed file silently changes which document sits at each position."""

    file: str  # path as given in data.files (or the file name inside data.path)
    size: int = Field(ge=0)
    sha256: str | None = None


class HFResume(StrictModel):
    """A restart of a Hugging Face `datasets` run at iteration `iteration` (the first after it).

    mode `skip_batches`: the loader was rebuilt and the consumed batches skipped (HF Trainer /
    accelerate's default): the order is the uninterrupted one, exact. `state_dict`: the dataset's
    state_dict was restored (StatefulDataLoader): a streaming shuffle buffer restarts empty, which
    the replay reproduces for num_workers 0 (with workers it is labelled best-effort). `unknown`:
    replayed as if uninterrupted, labelled best-effort (exact = False) from this iteration on.
    Map-style order does not depend on how the run resumed, so its rows stay exact.
    """

    iteration: int = Field(ge=2)
    mode: Literal["skip_batches", "state_dict", "unknown"] = "unknown"


class HFData(StrictModel):
    """A Hugging Face `datasets` pipeline over local files (see dataloaders/hf for the order).

    Map-style: load_dataset(file_format, data_files=files) -> Dataset.shuffle(seed) (seed + epoch
    per epoch when set_epoch) -> optional packing into pack_tokens-token sequences ->
    split_dataset_by_node -> DataLoader(batch_size=per_device_batch_size).
    Streaming: load_dataset(..., streaming=True) -> IterableDataset.shuffle(seed, buffer_size,
    max_buffer_input_shards) -> split_dataset_by_node(rank, world_size) -> set_epoch(e) ->
    DataLoader(batch_size=per_device_batch_size, num_workers). Iteration i takes the i-th batch of
    every rank; rank r's example j sits at global position r * per_device_batch_size + j.
    (Map-style DataLoader workers do not change the order; streaming ones do.)
    """

    format: Literal["hf"]
    name: PrintableName = "hf"  # the `dataset` column of the replay table
    files: list[Path] | None = None  # shard paths or globs (sorted, as datasets resolves them)
    path: Path | None = None  # a Dataset.save_to_disk directory (map-style)
    file_format: Literal["parquet", "json", "arrow"] | None = None  # inferred from extensions
    text_field: str = "text"
    provenance_fields: list[str] = Field(default_factory=list)  # the shard file name is `file`
    streaming: bool = False
    shuffle: bool = True
    seed: int = 42
    buffer_size: int = Field(default=1000, gt=0)
    max_buffer_input_shards: int = Field(default=10, gt=0)
    epochs: int = Field(default=1, gt=0)
    set_epoch: bool = True
    world_size: int = Field(default=1, gt=0)
    split_strategy: Literal["auto", "shards", "examples"] = "auto"
    num_workers: int = Field(default=0, ge=0)
    per_device_batch_size: int = Field(gt=0)
    drop_last: bool = False
    with_format: str | None = None  # IterableDataset.with_format(...): changes the buffer path
    pack_tokens: int | None = Field(default=None, gt=0)
    pack_group_size: int | None = Field(default=None, gt=0)  # run_clm group_texts map batches
    eos_token: str | None = None  # appended to every document before packing
    datasets_version: str | None = None
    shards: list[ShardRecord] | None = None
    resumes: list[HFResume] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> HFData:
        if (self.files is None) == (self.path is None):
            raise ValueError("give exactly one of data.files or data.path")
        if self.files is not None and not self.files:
            raise ValueError("data.files is empty")
        if self.streaming and self.datasets_version is None:
            raise ValueError(
                "streaming order depends on the datasets version: record data.datasets_version"
            )
        if self.streaming and self.pack_tokens is not None:
            raise ValueError("pack_tokens is supported for map-style (streaming: false) only")
        if self.path is not None and self.streaming:
            raise ValueError("a save_to_disk directory (data.path) is replayed map-style only")
        if self.pack_group_size is not None and self.pack_tokens is None:
            raise ValueError("pack_group_size needs pack_tokens")
        check_resume_order(self.resumes)
        return self

    @property
    def global_batch_size(self) -> int:
        """Examples per iteration over all ranks (must equal training.global_batch_size)."""
        return self.per_device_batch_size * self.world_size


class OlmoCoreSource(StrictModel):
    """Token files of one named source (the `dataset` column). OLMo-core concatenates every
    source's paths in config order into one NumpyFSLDataset; the grouping is ours, for blame."""

    name: PrintableName
    paths: list[Path] = Field(min_length=1)  # raw token arrays (Dolma `.npy`), in run order


class OlmoCoreInstanceFilter(StrictModel):
    """OLMo-core's InstanceFilterConfig: an instance with a 1..max_period-token pattern repeated at
    least max_count times is masked out of the loss (it is still drawn)."""

    repetition_max_period: int = Field(default=13, gt=0)
    repetition_min_period: int = Field(default=1, gt=0)
    repetition_max_count: int = Field(default=32, gt=0)


class OlmoCoreResume(StrictModel):
    """A restart at iteration `iteration` (the first step after it) from a checkpoint whose
    data-loader state is `state`: a JSON file of `NumpyDataLoaderBase.state_dict()`, or the
    trainer's `train/rank0.pt`. Replay checks it against the config instead of trusting it."""

    iteration: int = Field(ge=2)
    state: Path
    # The run restarted on other data (OLMo-core's ignore_fingerprint_mismatch): from this
    # iteration on, these sources replace data.sources; the loader keeps the state's epoch and
    # batches processed, over the new dataset's order.
    sources: list[OlmoCoreSource] | None = None


class OlmoCoreData(StrictModel):
    """An OLMo-core NumpyFSLDataset + NumpyFSLDataLoader run (see dataloaders/olmo_core)."""

    format: Literal["olmo-core"]
    sources: list[OlmoCoreSource] = Field(min_length=1)
    sequence_length: int = Field(gt=0)
    max_target_sequence_length: int | None = Field(default=None, gt=0)
    dtype: Literal["uint8", "uint16", "uint32", "uint64"] = "uint16"
    eos_token_id: int = Field(ge=0)
    pad_token_id: int = Field(ge=0)
    vocab_size: int = Field(gt=0)
    bos_token_id: int | None = Field(default=None, ge=0)
    global_batch_size: int = Field(gt=0)  # in TOKENS, as NumpyDataLoaderConfig.global_batch_size
    seed: int
    shuffle: bool = True
    dp_world_size: int = Field(default=1, gt=0)
    work_dir: Path | None = None  # where the run saved global_indices_*.npy (read when present)
    metadata_fields: list[str] = Field(default_factory=lambda: ["id", "src", "loc"])
    instance_filter: OlmoCoreInstanceFilter | None = None
    resumes: list[OlmoCoreResume] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> OlmoCoreData:
        names = [s.name for s in self.sources]
        if len(set(names)) != len(names):
            raise ValueError(f"data.sources names must be unique, got {names}")
        taken = RESERVED_COLUMNS | {"file", "instance_masked"}
        clash = sorted(set(self.metadata_fields) & taken)
        if clash or len(set(self.metadata_fields)) != len(self.metadata_fields):
            raise ValueError(
                f"data.metadata_fields must be distinct names that are not replay columns, got "
                f"{self.metadata_fields} ({', '.join(clash) or 'repeated'})"
            )
        seq, target = self.sequence_length, self.max_target_sequence_length
        if target is not None and (target < seq or target % seq):
            raise ValueError(
                f"max_target_sequence_length {target} must be a multiple of sequence_length {seq}"
            )
        if self.global_batch_size % seq:
            raise ValueError(
                f"global_batch_size {self.global_batch_size} tokens is not a multiple of "
                f"sequence_length {seq}"
            )
        per_rank = self.global_batch_size // self.dp_world_size
        if self.global_batch_size % self.dp_world_size or per_rank % seq:
            raise ValueError(
                f"global_batch_size {self.global_batch_size} tokens does not split into whole "
                f"instances over dp_world_size {self.dp_world_size} (OLMo-core refuses it too)"
            )
        check_resume_order(self.resumes)
        paths: dict[str, list[Path]] = {}
        for sources in [self.sources] + [r.sources for r in self.resumes if r.sources]:
            for src in sources:
                if paths.setdefault(src.name, list(src.paths)) != list(src.paths):
                    raise ValueError(
                        f"source {src.name!r} has other paths in another data stage: give the "
                        "changed source a new name (documents are named by source and file)"
                    )
        return self

    @property
    def stage_start_iterations(self) -> list[int]:
        """First iteration of each data stage (a resume with new sources starts one)."""
        return [1] + [r.iteration for r in self.resumes if r.sources]

    @property
    def instances_per_batch(self) -> int:
        """Instances per global batch (OLMo-core counts the batch in tokens)."""
        return self.global_batch_size // self.sequence_length


class MosaicStream(StrictModel):
    """One MosaicML `Stream`: a local MDS directory (index.json + shards) and its weight, given as
    at most one of proportion (relative), repeat or choose (absolute), as in streaming.Stream."""

    local: Path  # the directory holding index.json (Stream's local/split joined)
    name: PrintableName | None = (
        None  # the `dataset` column of the replay table (default: folder name)
    )
    proportion: float | None = Field(default=None, ge=0)
    repeat: float | None = Field(default=None, ge=0)
    choose: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _one_weight(self) -> MosaicStream:
        given = [w for w in (self.proportion, self.repeat, self.choose) if w is not None]
        if len(given) > 1:
            raise ValueError("give at most one of proportion, repeat, choose (streaming's rule)")
        return self

    @property
    def display_name(self) -> str:
        return self.name or self.local.name


class MosaicState(StrictModel):
    """A StreamingDataset.state_dict() as the checkpoint stored it (Composer: the train
    dataloader's `dataset_state`)."""

    epoch: int = Field(ge=0)
    sample_in_epoch: int = Field(ge=0)
    num_canonical_nodes: int = Field(gt=0)
    shuffle_seed: int = Field(ge=0)
    initial_physical_nodes: int | None = Field(default=None, gt=0)


class MosaicResume(StrictModel):
    """A restart of a streaming run: iteration `iteration` (the first after the restart) is the
    first batch the resumed StreamingDataset yields from `state` (the state_dict the checkpoint
    stored: inline, or `state_file`, a JSON file holding it)."""

    iteration: int = Field(ge=2)
    state: MosaicState | None = None
    state_file: Path | None = None

    @model_validator(mode="after")
    def _one_state(self) -> MosaicResume:
        if (self.state is None) == (self.state_file is None):
            raise ValueError("give exactly one of state or state_file for a resume")
        return self


class MosaicData(StrictModel):
    """A MosaicML StreamingDataset over local MDS streams, iterated by a torch DataLoader on every
    rank (see dataloaders/mosaic for the order). Field names and defaults are StreamingDataset's
    (streaming 0.13); the world is num_nodes x ranks_per_node ranks, num_workers DataLoader
    workers each. Iteration i takes the i-th DataLoader batch of every rank; rank r's example j
    sits at global position r * batch_size + j."""

    format: Literal["mosaic-streaming"]
    streams: list[MosaicStream] = Field(min_length=1)
    text_field: str = "text"
    provenance_fields: list[str] = Field(default_factory=list)  # MDS columns; `shard` is added
    epoch_size: int | None = Field(default=None, gt=0)
    sampling_method: Literal["balanced", "fixed"] = "balanced"
    sampling_granularity: int = Field(default=1, gt=0)
    partition_algo: Literal["orig", "relaxed"] = "relaxed"
    num_canonical_nodes: int | None = Field(default=None, gt=0)
    batch_size: int = Field(gt=0)  # per device, as given to StreamingDataset and the DataLoader
    shuffle: bool = False
    shuffle_algo: Literal["py1e", "py1br", "py1b", "py1s", "py2s", "naive"] = "py1e"
    shuffle_seed: int = Field(default=9176, ge=0)
    shuffle_block_size: int | None = Field(default=None, gt=0)
    batching_method: Literal["random", "stratified", "per_stream", "device_per_stream"] = "random"
    num_nodes: int = Field(default=1, gt=0)
    ranks_per_node: int = Field(default=1, gt=0)
    num_workers: int = Field(default=0, ge=0)
    drop_last: bool = False
    streaming_version: str = "0.13.0"
    resumes: list[MosaicResume] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> MosaicData:
        names = [s.display_name for s in self.streams]
        if len(set(names)) != len(names):
            raise ValueError(f"stream names must be unique, got {names}")
        relative = [s.proportion is not None for s in self.streams]
        if any(relative) and not all(relative):
            raise ValueError("streams mix proportion with repeat/choose (streaming refuses it)")
        absolute = any(s.repeat is not None or s.choose is not None for s in self.streams)
        if absolute and self.epoch_size is not None:
            raise ValueError("epoch_size only goes with proportion weights (streaming's rule)")
        check_resume_order(self.resumes)
        return self

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.ranks_per_node

    @property
    def global_batch_size(self) -> int:
        """Examples per iteration over all ranks (must equal training.global_batch_size)."""
        return self.batch_size * self.world_size


DataConfig = Annotated[
    MegatronData | HFData | OlmoCoreData | MosaicData, Field(discriminator="format")
]
