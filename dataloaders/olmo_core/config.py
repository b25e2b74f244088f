"""The `data:` section of an OLMo-core run (`format: olmo-core`): NumpyFSLDatasetConfig and
NumpyDataLoaderConfig's fields, the token files per named source, and the run's restarts."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from dataloaders.base import RESERVED_COLUMNS
from dataloaders.config_base import DataSection, PrintableName, StrictModel, check_resume_order
from dataloaders.olmo_core.remote import check_scheme
from dataloaders.storage.urls import scheme_of
from dataloaders.trainers import OLMO_CORE


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
