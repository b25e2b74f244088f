"""The run config's `data:` section, one model per loader family (`format:` megatron, hf,
olmo-core, mosaic-streaming), and the strict base model every part of the run config uses.
`dataloaders/run_config.py` has the whole config (training, resumes, checkpoints) and its loading;
`configs/example-*.yaml` document every field.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import Field, field_validator, model_validator

from dataloaders.base import RESERVED_COLUMNS
from dataloaders.config_base import DataSection
from dataloaders.config_base import PrintableName as PrintableName
from dataloaders.config_base import StrictModel as StrictModel
from dataloaders.config_base import check_resume_order as check_resume_order
from dataloaders.config_base import printable_name as printable_name
from dataloaders.data_section_mosaic import MosaicData as MosaicData
from dataloaders.data_section_mosaic import MosaicResume as MosaicResume
from dataloaders.data_section_mosaic import MosaicState as MosaicState
from dataloaders.data_section_mosaic import MosaicStream as MosaicStream
from dataloaders.trainers import OLMO_CORE


class DatasetSpec(StrictModel):
    """One dataset of a blend: a Megatron path prefix (without .bin/.idx) and its weight.

    A prefix in object storage (`s3://bucket/key`, `msc://profile/key`) is kept in `remote`;
    `prefix` is then where megatron-core caches its `.idx` (`object_storage_cache_path` joined
    with the URL without its scheme, Megatron-LM core 0.16.1
    `megatron/core/datasets/object_storage_utils.py:170-192`), see MegatronData."""

    prefix: Path
    weight: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    name: PrintableName | None = None
    manifest: Path | None = None  # Parquet, one row per document in .idx order (doc_id + facets)
    remote: str | None = None  # the prefix's URL when the data is in object storage

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


class MegatronData(DataSection):
    """Megatron-core GPTDataset / BlendedDataset parameters (the run's --data-* arguments)."""

    format: Literal["megatron"] = "megatron"
    seed: int = Field(default=1234, ge=0, le=2**32 - 1)  # numpy RandomState's range, as Megatron
    seq_length: int = Field(gt=0)
    split: str = "969,30,1"
    add_extra_token: bool = True  # megatron-core's add_extra_token_to_sequence (default True)
    mid_level_dataset_surplus: float = 0.005
    cache_path: Path | None = None  # --data-cache-path; Megatron's own .npy indices are read here
    # --object-storage-cache-path: where s3:// and msc:// prefixes' .idx files are cached
    object_storage_cache_path: Path | None = None
    blend: list[DatasetSpec] | None = None  # a single blend for the whole run ...
    stages: list[DataStage] | None = None  # ... or blends that change at given iterations
    # a run without data in object storage hashes as it did before the field existed
    unhashed_defaults: ClassVar[dict[str, Any]] = {"object_storage_cache_path": None}

    @model_validator(mode="before")
    @classmethod
    def _remote_prefixes(cls, raw: Any) -> Any:
        """Prefixes in object storage: the URL moves to `remote`, the prefix becomes its place
        in the object-storage cache (dataloaders/megatron/remote.py)."""
        from dataloaders.megatron.remote import place_remote_prefixes

        return place_remote_prefixes(raw)

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


class HFData(DataSection):
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
    # shard paths or globs (sorted, as datasets resolves them), or URLs read through fsspec
    files: list[Path | str] | None = None
    # load_dataset's storage_options (the fsspec filesystem's arguments for remote files); never
    # dumped, hashed or shown: it may hold credentials
    storage_options: dict[str, Any] | None = Field(default=None, exclude=True, repr=False)
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

    @field_validator("files", mode="before")
    @classmethod
    def _local_or_url(cls, value: Any) -> Any:
        from dataloaders.storage.urls import scheme_of

        if not isinstance(value, list):
            return value
        return [Path(p) if isinstance(p, str) and not scheme_of(p) else p for p in value]

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

    def check_run(self, run: Any) -> None:
        training = run.training
        if training.global_batch_size != self.global_batch_size:
            raise ValueError(
                f"training.global_batch_size {training.global_batch_size} != "
                f"data.per_device_batch_size x data.world_size = {self.global_batch_size}"
            )
        if training.resumes:
            raise ValueError("hf runs give restarts in data.resumes, not training")
        if training.rampup_batch_size is not None:
            raise ValueError("rampup_batch_size is not supported for hf runs")
        if self.pack_tokens is not None and run.tokenizer is None:
            raise ValueError("data.pack_tokens needs the run's tokenizer (tokenizer:)")


class OlmoCoreSource(StrictModel):
    """Token files of one named source (the `dataset` column). OLMo-core concatenates every
    source's paths in config order into one NumpyFSLDataset; the grouping is ours, for blame."""

    name: PrintableName
    # raw token arrays (Dolma `.npy`), in run order; a URL (s3://, r2://, weka://, gs://,
    # http(s)://) stays a str and is read through the storage layer (olmo_core/remote.py)
    paths: list[Path | str] = Field(min_length=1)

    @field_validator("paths", mode="before")
    @classmethod
    def _local_or_url(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        from dataloaders.olmo_core.remote import check_scheme
        from dataloaders.storage.urls import scheme_of

        return [
            check_scheme(p, "data.sources.paths")
            if isinstance(p, str) and scheme_of(p)
            else Path(p)
            if isinstance(p, str)
            else p
            for p in value
        ]


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


def olmo_core_dtype(vocab_size: int) -> str:
    """OLMo-core's dtype for an unset `dtype`: the smallest uint holding vocab_size - 1
    (ai2-olmo-core 3.0.0 olmo_core/data/numpy_dataset.py:2685-2699 get_dtype)."""
    for bits in (8, 16, 32, 64):
        if vocab_size - 1 <= 2**bits - 1:
            return f"uint{bits}"
    raise ValueError(f"vocab_size {vocab_size} is too big for any token dtype (OLMo-core too)")


class OlmoCoreData(DataSection):
    """An OLMo-core NumpyFSLDataset + NumpyFSLDataLoader run (see dataloaders/olmo_core). Every
    default is the library's, cited in docs/olmo-core.md (ai2-olmo-core 3.0.0): dtype from the
    vocabulary size, the others as NumpyFSLDatasetConfig, TokenizerConfig, InstanceFilterConfig
    and wrap_numpy_dataset default them. What the library does not default is required
    (dp_world_size: it takes the process group's size, data_loader.py:1157)."""

    format: Literal["olmo-core"]
    # An OLMo-core data loader is read by OLMo-core's trainer: its skip flags are StepSkipRange.
    default_trainer: ClassVar[str | None] = OLMO_CORE
    # Path resolution fields a run without a mix or globs never sets.
    unhashed_defaults: ClassVar[dict[str, Any]] = {
        "expand_glob": False,
        "source_permutation_seed": None,
        "mix": None,
        "mix_base_dir": None,
        "mix_file": None,
        "tokenizer_identifier": None,
        "generate_doc_lengths": False,
    }
    sources: list[OlmoCoreSource] = Field(default_factory=list)
    sequence_length: int = Field(gt=0)
    max_target_sequence_length: int | None = Field(default=None, gt=0)
    dtype: Literal["uint8", "uint16", "uint32", "uint64"]
    eos_token_id: int = Field(ge=0)
    pad_token_id: int = Field(ge=0)
    vocab_size: int = Field(gt=0)
    bos_token_id: int | None = Field(default=None, ge=0)
    global_batch_size: int = Field(gt=0)  # in TOKENS, as NumpyDataLoaderConfig.global_batch_size
    seed: int
    shuffle: bool = True
    dp_world_size: int = Field(gt=0)
    work_dir: Path | None = None  # where the run saved global_indices_*.npy (read when present)
    metadata_fields: list[str] = Field(default_factory=lambda: ["id", "src", "loc"])
    instance_filter: OlmoCoreInstanceFilter | None = None
    generate_doc_lengths: bool = False
    # NumpyDatasetConfig's path resolution (dataloaders/olmo_core/paths.py)
    expand_glob: bool = False
    source_permutation_seed: int | None = None
    mix: str | None = None
    mix_base_dir: Path | None = None
    mix_file: Path | None = None  # olmo_core/data/mixes/<mix>.txt of the ai2-olmo-core release
    tokenizer_identifier: str | None = None  # TokenizerConfig.identifier, names a mix's files
    resumes: list[OlmoCoreResume] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _library_dtype(cls, raw: Any) -> Any:
        """dtype left unset is inferred from the vocabulary size, as OLMo-core infers it; the
        data-parallel size, which the library reads from the job, is asked for by name."""
        if isinstance(raw, dict) and raw.get("dp_world_size") is None:
            raise ValueError(
                "set data.dp_world_size, the run's data-parallel size (OLMo-core takes it from "
                "the job; the trainer state's world_size without model parallelism)"
            )
        if not isinstance(raw, dict) or raw.get("dtype") is not None:
            return raw
        vocab = raw.get("vocab_size")
        if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab <= 0:
            raise ValueError(
                "set data.dtype or data.vocab_size (OLMo-core infers the token dtype from the "
                "tokenizer's vocab size)"
            )
        return {**raw, "dtype": olmo_core_dtype(vocab)}

    @model_validator(mode="after")
    def _consistent(self) -> OlmoCoreData:
        names = [s.name for s in self.sources]
        if len(set(names)) != len(names):
            raise ValueError(f"data.sources names must be unique, got {names}")
        self._check_mix()
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

    def _check_mix(self) -> None:
        """Either sources or a mix, as OLMo-core's "Only one of 'paths' or 'mix'"; a mix needs
        its base directory, its listing file and the tokenizer identifier that names its files."""
        if self.mix is None:
            if not self.sources:
                raise ValueError("give data.sources (the token files) or data.mix")
            given = [
                n for n in ("mix_base_dir", "mix_file", "tokenizer_identifier") if getattr(self, n)
            ]
            if given:
                raise ValueError(f"data.{given[0]} is only read with data.mix")
            return
        if self.sources:
            raise ValueError("give data.sources or data.mix, not both (OLMo-core refuses both)")
        for name, what in (
            ("mix_base_dir", "the directory the mix's paths are relative to"),
            ("mix_file", "the mix's listing, olmo_core/data/mixes/<mix>.txt of ai2-olmo-core"),
            ("tokenizer_identifier", "the tokenizer identifier that names the mix's files"),
        ):
            if getattr(self, name) is None:
                raise ValueError(f"data.mix needs data.{name} ({what})")

    @property
    def stage_start_iterations(self) -> list[int]:
        """First iteration of each data stage (a resume with new sources starts one)."""
        return [1] + [r.iteration for r in self.resumes if r.sources]

    @property
    def instances_per_batch(self) -> int:
        """Instances per global batch (OLMo-core counts the batch in tokens)."""
        return self.global_batch_size // self.sequence_length

    def check_run(self, run: Any) -> None:
        training = run.training
        if training.global_batch_size != self.instances_per_batch:
            raise ValueError(
                f"training.global_batch_size {training.global_batch_size} != "
                f"data.global_batch_size / data.sequence_length = {self.instances_per_batch} "
                "instances"
            )
        if training.resumes:
            raise ValueError("olmo-core runs give restarts in data.resumes")
        if training.rampup_batch_size is not None:
            raise ValueError("rampup_batch_size is not supported for olmo-core")
        if training.trainer != self.default_trainer:
            raise ValueError(
                f"training.trainer {training.trainer!r}: an olmo-core data loader is read by "
                f"OLMo-core's trainer (training.trainer: {self.default_trainer})"
            )
        if training.micro_batch_size != 1 or training.data_parallel_size != 1:
            raise ValueError(
                "olmo-core runs give ranks in data.dp_world_size (leave "
                "training.micro_batch_size and data_parallel_size at 1)"
            )


DataConfig = Annotated[
    MegatronData | HFData | OlmoCoreData | MosaicData, Field(discriminator="format")
]


def data_model(fmt: Any) -> type[DataSection] | None:
    """The `data:` model whose `format` is `fmt` (None when no family has it)."""
    for model in get_args(get_args(DataConfig)[0]):
        if fmt in get_args(model.model_fields["format"].annotation):
            return model
    return None
