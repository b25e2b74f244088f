"""The `data:` section of a Hugging Face `datasets` run (`format: hf`): the pipeline's files,
shuffle, packing, world and DataLoader, and how the run resumed (dataloaders/hf for the order)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from dataloaders.config_base import DataSection, PrintableName, StrictModel, check_resume_order
from dataloaders.storage.urls import scheme_of


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
