"""The `data:` section of a torchtitan run (`format: torchtitan`).

What it describes, in torchtitan 0.3.0's words. Line numbers here and in the package are the
PyPI 0.3.0 wheel's, whose files (hf_datasets/, components/dataloader.py, components/tokenizer.py,
components/checkpointer/, trainer.py) are identical to pytorch/torchtitan commit
1fdf90d3f9b756ef709ce262bc839f1dab679b5e ("Set version to 0.3.0rc1 (#4216)"):

- each source is one entry of torchtitan's dataset table (`DATASETS`, text_datasets.py:38-54)
  whose loader is `load_dataset(file_format, data_files=files, split="train",
  streaming=streaming)` over local files and whose sample processor returns
  `sample[text_field]` (the built-in `c4_test` and `c4` loaders have that shape, :44-53);
- `interleaved: false` is `HuggingFaceTextDataLoader` (:238-289) over one source;
  `interleaved: true` is `InterleavedHuggingFaceTextDataLoader` (:300-372) over the sources
  with their `weight`s (`HFDataSource.weight`, :296), `seed` and `stopping_strategy`;
- `seq_len` is `training.seq_len`; `local_batch_size` is the dataloader's batch size
  (`training.local_batch_size`, or `parallelism.pipeline_parallel_microbatch_size` under
  pipeline parallelism, trainer.py:570-574); `dp_world_size` is the batch degree (the data
  parallel ranks the loader is split over, trainer.py:576-577). A step takes
  training.global_batch_size / (local_batch_size x dp_world_size) batches per rank
  (trainer.py:414-433, 885-889).

Every default is torchtitan's: `infinite` True (text_datasets.py:250), `seed` 42 (:308),
`stopping_strategy` "on_first_exhausted" (:311-313), `weight` 1 (:296), `num_workers` 0
(components/dataloader.py:73). What the replay cannot follow is refused here, in one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from dataloaders.config_base import DataSection, PrintableName, StrictModel, check_resume_order
from dataloaders.storage.urls import scheme_of
from dataloaders.trainers import TORCHTITAN

FILE_FORMATS = Literal["parquet", "json", "arrow"]


class ShardFile(StrictModel):
    """A data file as recorded when the run started (size, sha256), so a later replay refuses
    changed files."""

    file: str
    size: int = Field(ge=0)
    sha256: str


class TorchtitanSource(StrictModel):
    """One dataset of the run: its name in torchtitan's dataset table and its local files."""

    name: PrintableName  # the `dataset` name (and the replay table's `dataset` column)
    files: list[Path | str] = Field(min_length=1)  # paths or globs, in the loader's order
    file_format: FILE_FORMATS | None = None  # inferred from the files' extensions
    text_field: str = "text"  # what the sample processor returns (c4's: sample["text"], :32-34)
    streaming: bool = False  # load_dataset(..., streaming=True): an IterableDataset
    weight: float = Field(default=1.0, ge=0, allow_inf_nan=False)  # HFDataSource.weight (:296)
    provenance_fields: list[str] = Field(default_factory=list)  # the file name is `file`
    shards: list[ShardFile] | None = None

    @field_validator("files", mode="before")
    @classmethod
    def _paths(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        return [Path(p) if isinstance(p, str) and not scheme_of(p) else p for p in value]


class TorchtitanResume(StrictModel):
    """A restart from the run's checkpoint `step-N` (`--checkpoint.load_step N`, or the latest):
    iterations after N are replayed from the loader state that folder holds."""

    # N: the step the checkpoint was saved after (step-0 is model-only, dcp.py:561)
    iteration: int = Field(ge=1)
    checkpoint: Path  # the step-N folder (its .metadata and __R_0.distcp shards)


class TorchtitanData(DataSection):
    """torchtitan's text dataloader (see the module docstring for each field's source)."""

    format: Literal["torchtitan"]
    # read by torchtitan's own training loop (dataloaders/trainers/torchtitan.py)
    default_trainer: ClassVar[str | None] = TORCHTITAN
    # which of torchtitan's pipelines: 0.3.0's HF datasets loaders. main's Grain pipeline
    # (pytorch/torchtitan 1b04fc1c3576, "[Grain] Replace dataset/dataloader with grain (#4088)",
    # not an ancestor of the 0.3.0 commit above; PyPI's newest is 0.3.0) is refused
    pipeline: Literal["hf_datasets", "grain"] = "hf_datasets"
    sources: list[TorchtitanSource] = Field(min_length=1)
    interleaved: bool = False  # InterleavedHuggingFaceTextDataLoader instead of the single one
    seed: int = 42  # the interleaver's random.Random(seed) (text_datasets.py:308)
    stopping_strategy: Literal["on_first_exhausted", "all_exhausted"] = "on_first_exhausted"
    infinite: bool = True  # each source re-loops (text_datasets.py:250)
    seq_len: int = Field(gt=0)
    local_batch_size: int = Field(gt=0)
    dp_world_size: int = Field(default=1, gt=0)
    num_workers: int = Field(default=0, ge=0)  # components/dataloader.py:73
    resumes: list[TorchtitanResume] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> TorchtitanData:
        if self.pipeline == "grain":
            raise ValueError(
                "data.pipeline grain: torchtitan's Grain pipeline (main after 0.3.0, PR #4088, "
                "grain 0.2.18) is in no torchtitan release (0.3.0 is the newest); only 0.3.0's "
                "HuggingFaceTextDataLoader and InterleavedHuggingFaceTextDataLoader are replayed"
            )
        names = [s.name for s in self.sources]
        if len(set(names)) != len(names):
            raise ValueError(f"data.sources: names must be unique, got {names}")
        if len(self.sources) > 1 and not self.interleaved:
            raise ValueError(
                "data.sources: several sources are torchtitan's "
                "InterleavedHuggingFaceTextDataLoader: set data.interleaved: true"
            )
        if self.interleaved and sum(s.weight for s in self.sources) == 0:
            raise ValueError("data.sources: the weights sum to 0 (interleaved.py:67-69)")
        if self.num_workers != 0:
            raise ValueError(
                f"data.num_workers {self.num_workers}: torchtitan 0.3.0's HuggingFaceTextDataset "
                "does not split its data between DataLoader workers (every worker reads the "
                "rank's whole split), so its order with workers is not replayed; only 0"
            )
        check_resume_order(self.resumes)
        return self

    def accumulation(self, global_batch_size: int) -> int:
        """Batches each rank yields per step (gradient accumulation x pipeline microbatches)."""
        return global_batch_size // (self.local_batch_size * self.dp_world_size)

    def check_run(self, run: Any) -> None:
        training = run.training
        per_step = self.local_batch_size * self.dp_world_size
        if training.global_batch_size % per_step:
            raise ValueError(
                f"training.global_batch_size {training.global_batch_size} is not a multiple of "
                f"data.local_batch_size x data.dp_world_size = {per_step} (torchtitan/trainer.py:"
                "421-427 refuses it too)"
            )
        if training.trainer != self.default_trainer:
            raise ValueError(
                f"training.trainer {training.trainer!r}: a torchtitan data loader is read by "
                f"torchtitan's trainer (training.trainer: {self.default_trainer})"
            )
        if training.resumes:
            raise ValueError("torchtitan runs give restarts in data.resumes, not training")
        if training.rampup_batch_size is not None:
            raise ValueError("rampup_batch_size: torchtitan has no batch-size ramp-up")
        if training.micro_batch_size != 1 or training.data_parallel_size != 1:
            raise ValueError(
                "torchtitan runs give ranks in data.dp_world_size and the batch in "
                "data.local_batch_size (leave training.micro_batch_size and data_parallel_size "
                "at 1)"
            )
        if run.tokenizer is None:
            raise ValueError(
                "a torchtitan run packs tokens: give `tokenizer:` (the run's hf_assets_path "
                "folder, with tokenizer.json and tokenizer_config.json)"
            )
