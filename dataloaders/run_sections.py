"""The run config's sections other than `data:`: the batch-size schedule and the length of
training (`training:`, with the restarts and the skips a restart applied) and Megatron's
tokenizer flags (`tokenizer_args:`). The loader families read them (the schedule replays
`training:`, the Megatron launch-argument reader fills `tokenizer_args:`) without the whole
config, `dataloaders/run_config.py`, which joins them with the `data:` section.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import AfterValidator, Field, model_validator

from dataloaders.config_base import StrictModel
from dataloaders.trainers import DEFAULT_TRAINER, REGISTRY, Trainer, unknown_trainer


class Resume(StrictModel):
    """A restart: iteration `iteration` (the first after the restart) begins at global sample
    `consumed_samples`, as restored from the checkpoint (it differs from the computed count when
    the batch size changed or a Megatron-DeepSpeed skip drained batches)."""

    iteration: int = Field(ge=1)
    consumed_samples: int = Field(ge=0)


def _known_trainer(value: str) -> str:
    if value not in REGISTRY:
        raise ValueError(unknown_trainer(value))
    return value


# A training loop's name in dataloaders.trainers.TRAINERS, refused when unknown.
TrainerName = Annotated[str, AfterValidator(_known_trainer)]


class _NamesTrainer:
    """For a section with a `trainer` field (a TrainerName)."""

    @property
    def registered_trainer(self) -> Trainer:
        """The Trainer that `trainer` names (validated when the config was read)."""
        return REGISTRY[self.trainer]  # type: ignore[attr-defined]


class AppliedSkip(_NamesTrainer, StrictModel):
    """Skip flags a restart of this run already used: the run consumed its data differently.

    Megatron-LM, argonne and OLMo-core still draw a skipped step's batch (numbering stays
    absolute; the replay marks those rows skipped). BigScience Megatron-DeepSpeed drains
    micro-batches without advancing its counters, so every later logged iteration trains other
    data than the plain schedule says; the replay follows the trainer's loop to say which.
    """

    trainer: TrainerName
    resume_from: int = Field(ge=0)  # the checkpoint iteration that restart loaded
    flag: str  # the skip flag as it was passed (e.g. "--iterations-to-skip 5001 5002")
    consumed_samples: int | None = Field(default=None, ge=0)  # restored then (default: counted)


class TrainingSpec(_NamesTrainer, StrictModel):
    """The batch-size schedule, the length of training, and the loop that consumes skip flags."""

    global_batch_size: int = Field(gt=0)
    micro_batch_size: int = Field(default=1, gt=0)
    data_parallel_size: int = Field(default=1, gt=0)
    train_iters: int | None = Field(default=None, gt=0)
    train_samples: int | None = Field(default=None, gt=0)
    rampup_batch_size: tuple[int, int, int] | None = None  # (start, increment, ramp samples)
    resumes: list[Resume] = Field(default_factory=list)
    # Which training loop reads the skip flags we write: a name in dataloaders.trainers.TRAINERS.
    trainer: TrainerName = DEFAULT_TRAINER
    applied_skips: list[AppliedSkip] = Field(default_factory=list)

    def iterations(self, batch: int) -> int:
        """How many iterations the run trains: train_iters, else the whole batches of `batch`
        samples in train_samples (a fixed batch size: Megatron's rampup is schedule.py's)."""
        if self.train_iters is not None:
            return self.train_iters
        assert self.train_samples is not None
        return self.train_samples // batch

    @model_validator(mode="after")
    def _length_given(self) -> TrainingSpec:
        if self.train_iters is None and self.train_samples is None:
            raise ValueError("give training.train_iters or training.train_samples")
        samples = self.train_samples or self.global_batch_size * (self.train_iters or 0)
        if samples > MAX_TRAIN_SAMPLES or (self.train_iters or 0) > MAX_TRAIN_ITERS:
            raise ValueError(
                f"the run would train {samples:,} samples in {self.train_iters or '?'} iterations, "
                "more than any pretraining run (the per-iteration and per-sample arrays would "
                "not fit in memory); check global_batch_size, train_iters and train_samples"
            )
        if self.rampup_batch_size is not None:
            start, incr, samples = self.rampup_batch_size
            if start <= 0 or incr <= 0 or samples <= 0:
                raise ValueError("rampup_batch_size values must be positive")
            if (self.global_batch_size - start) % incr != 0:
                raise ValueError(
                    "global_batch_size - rampup start must be a multiple of the increment "
                    f"(Megatron asserts this), got {self.rampup_batch_size}"
                )
            if self.train_samples is None:
                raise ValueError("rampup_batch_size needs training.train_samples (as Megatron)")
        iters = [r.iteration for r in self.resumes]
        if iters != sorted(set(iters)):
            raise ValueError(f"training.resumes must be in increasing iteration order, got {iters}")
        starts = iters + [a.resume_from + 1 for a in self.applied_skips]
        if len(starts) != len(set(starts)):
            raise ValueError(
                "training.resumes and training.applied_skips name the same restart twice "
                "(an applied skip's restart begins at resume_from + 1)"
            )
        return self


# Bounds that no real run reaches (15T tokens at 512 tokens a sample are 3e10 samples), checked
# before anything is sized by them: `train_iters: 1e15` would allocate a PB-sized schedule.
MAX_TRAIN_SAMPLES = 1 << 37
MAX_TRAIN_ITERS = 1 << 30


# Megatron's --tokenizer-type values whose flags the run config carries (TokenizerArgs); the
# launch-argument reader keeps a job's tokenizer flags for these alone.
MegatronTokenizerType = Literal[
    "HuggingFaceTokenizer",
    "GPT2BPETokenizer",
    "SentencePieceTokenizer",
    "GPTSentencePieceTokenizer",
    "Llama2Tokenizer",
    "TikTokenizer",
]
MEGATRON_TOKENIZER_TYPES: tuple[str, ...] = get_args(MegatronTokenizerType)


class TokenizerArgs(StrictModel):
    """How Megatron built the run's tokenizer: its launch flags under their `args` names, with
    Megatron's defaults (Megatron-LM d98e8a64dd megatron/training/config/training_config.py:698-741;
    dataloaders/tokenizer_megatron.py reads them as megatron-core's build_tokenizer does)."""

    tokenizer_type: MegatronTokenizerType | None = None
    tokenizer_sentencepiece_legacy: bool = False
    tokenizer_special_tokens: list[str] | None = None
    tiktoken_pattern: Literal["v1", "v2"] | None = None
    tiktoken_num_special_tokens: int = Field(default=1000, ge=0)
    vocab_size: int | None = Field(default=None, gt=0)
    legacy_tokenizer: bool = False  # Megatron-LM's --legacy-tokenizer (its pre-2026 classes)
    vocab_extra_ids: int = Field(default=0, ge=0)
