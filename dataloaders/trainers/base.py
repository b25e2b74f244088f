"""What every trainer owns, and the vocabulary of the loops that draw data when told to skip.

A skip flag is only right for the loop that reads it, and the loops disagree: on whether the
number is the step being taken or the steps completed, on whether a skipped step draws a global
batch or one micro-batch per "iteration", and on whether the counters advance. Each trainer
module transcribes one trainer's loop (the lines are cited there) to the level that decides which
samples the data iterator yields and which of them are trained on, beside the flag's name, its
parser, how a list of iterations is spelled in it, how the restart loads the rollback checkpoint,
and what the restarted job then does differently. They serve three readers: the replay of a run
that already applied skips (`dataloaders.schedule`), `forensics check-skip` (what would this
string drop?), and the skip plan (`forensics.skip.flags`), which proves every string it writes by
running the loop that will read it.

Vocabulary. A *draw* is a contiguous run of global samples the data iterator yielded in one go
(a step's global batch, or a drain of several micro-batches). Samples are global sample indices,
as Megatron's pretraining sampler yields them from `consumed_samples` on; a restarted job's
sampler starts at the consumed-samples count restored from its checkpoint. `unit` is
micro_batch_size * data_parallel_size: what one `next(data_iterator)` yields across the
data-parallel ranks.
"""

from __future__ import annotations

import re
import shlex
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from dataloaders.errors import ForensicsError

Range = tuple[int, int]  # inclusive, 1-indexed iterations


class Batches(Protocol):
    """What spelling a flag needs of the run's batch schedule (`dataloaders.schedule.Schedule`
    has it; the trainers do not import the schedule, which replays skips through them)."""

    unit: int  # micro_batch_size * data_parallel_size: one next() of the data iterator
    batch_size: Any  # int64[last_iteration + 1]: the samples iteration i drew (index 0 unused)


@dataclass(frozen=True)
class Draw:
    """Global samples [first_sample, first_sample + size) the data iterator yielded in one go.

    iteration  the iteration number the trainer logs for the step that drew them (for a
               Megatron-DeepSpeed drain: the number of the step that follows it)
    trained    False for a skipped step or a drain: drawn, never trained on
    consumed   the trainer's consumed-samples count after this draw (what a checkpoint saved
               right after it would restore; a Megatron-DeepSpeed drain leaves it unchanged)
    """

    iteration: int
    first_sample: int
    size: int
    trained: bool
    consumed: int


@dataclass(frozen=True)
class LoopStart:
    """What a (re)started job begins from.

    iteration         the loaded checkpoint's iteration (0 for a fresh start)
    consumed_samples  consumed samples restored from that checkpoint; the sampler starts here
    train_iters       the loop runs while the iteration counter is below this
    unit              micro_batch_size * data_parallel_size
    global_batch_size the batch size after any ramp (DeepSpeed's static gradient accumulation
                      steps are global_batch_size / unit)
    batch_size_at     the running global batch size the loop sets from consumed samples
    """

    iteration: int
    consumed_samples: int
    train_iters: int
    unit: int
    global_batch_size: int
    batch_size_at: Callable[[int], int]


@dataclass(frozen=True)
class LoopEnd:
    """What the loop drew, and its counters when it stopped."""

    draws: list[Draw]
    iteration: int
    consumed_samples: int  # as the trainer counts them (what a checkpoint saved now would hold)
    position: int  # the data iterator's next global sample


class Trainer(ABC):
    """One training loop that reads skip flags: everything forensics needs to know about it.

    Subclasses set the class attributes and implement the five abstract methods (a trainer
    that saves its checkpoints in other folders than Megatron's `iter_{:07d}` also sets
    `checkpoint_folder` and `checkpoint_pattern`); `dataloaders.trainers` lists one instance of
    each. Nothing else in the code asks which trainer it is by name.
    """

    name: ClassVar[str]  # the --trainer / training.trainer value
    label: ClassVar[str] = ""  # said after the name in --trainer's help, e.g. "(BigScience)"
    flag: ClassVar[str]  # the flag as it is spelled on the trainer's command line
    semantics: ClassVar[str]  # one sentence: what a value of the flag means to the loop
    reads_tracker: ClassVar[bool] = False  # also takes the values from a tracker file
    # The name of the console log and checkpoint format the trainer writes (forensics reads
    # them by this name: `triage --format`, the `--checkpoint` kinds); forks share it.
    output_format: ClassVar[str]
    # A skip drains batches without advancing the iteration counter (the loop must be given
    # room to reach the same iteration, and the drain is attributed to no logged iteration).
    drains_uncounted: ClassVar[bool] = False
    # Why the trainer cannot skip iterations at all, in one line (None: it has a skip option).
    # Such a trainer's restart plan is the rebuild, and wherever a skip would be offered
    # (the skip plan, the restart files, check-skip) this line is said instead.
    no_skip: ClassVar[str | None] = None
    # The folder each checkpoint is saved in under the save folder, named after the iteration
    # it holds the state after (`checkpoint_folder.format(iteration)`), and the pattern that
    # reads the iteration back from such a name (its one group). Megatron-LM's
    # get_checkpoint_name writes `iter_{:07d}` (NVIDIA/Megatron-LM d98e8a64dd,
    # megatron/training/checkpointing.py:230-270); an iteration past 9,999,999 takes 8 digits.
    checkpoint_folder: ClassVar[str] = "iter_{:07d}"
    checkpoint_pattern: ClassVar[re.Pattern[str]] = re.compile(r"iter_(\d+)")

    @abstractmethod
    def parse(self, text: str) -> list:
        """The skip specification the trainer's argument parser makes of `text` (the flag as
        pasted)."""

    @abstractmethod
    def loop(self, start: LoopStart, skip: Sequence, stop: int) -> LoopEnd:
        """Run the loop from `start` with the parsed `skip` until the counter reaches `stop`."""

    def run(self, start: LoopStart, skip: Sequence, until: int | None = None) -> LoopEnd:
        """Run the loop from `start` with the parsed `skip` until the counter reaches `until`
        (default, and at most: train_iters)."""
        stop = start.train_iters if until is None else min(until, start.train_iters)
        return self.loop(start, skip, stop)

    @abstractmethod
    def spell(self, ranges: Sequence[Range], schedule: Batches, checkpoint: int) -> str:
        """The flag text for the merged `ranges` on a restart from `checkpoint` (no checks:
        `forensics.skip.flags.write_flag` proves it by running `loop`)."""

    @abstractmethod
    def pin(self, checkpoint: int) -> str:
        """How to make the restarted job load checkpoint `checkpoint` and not the latest one
        (a checkpoint directory often holds checkpoints saved after the spike)."""

    def checkpoint_name(self, iteration: int) -> str:
        """The folder name of the checkpoint saved after `iteration` (Megatron: `iter_0000500`)."""
        return self.checkpoint_folder.format(iteration)

    def checkpoint_iteration(self, name: str) -> int | None:
        """The iteration a checkpoint folder called `name` holds the state after; None when the
        name is not one of this trainer's checkpoint folders."""
        match = self.checkpoint_pattern.fullmatch(name)
        return int(match.group(1)) if match else None

    def is_checkpoint(self, path: Path) -> bool:
        """Whether `path`, whose name is one of this trainer's checkpoint folders, holds a
        checkpoint: any directory by default; a trainer whose own listing checks the files a
        finished save leaves (OLMo-core) checks the same files here."""
        return path.is_dir()

    def checkpoints(self, folder: Path) -> list[int]:
        """The iterations of the checkpoints saved in the save folder `folder`, sorted ([] when
        none): the run's rollback candidates, `triage --checkpoints DIR`'s list."""
        if not folder.is_dir():
            return []
        found = []
        for entry in folder.iterdir():
            iteration = self.checkpoint_iteration(entry.name)
            if iteration is not None and self.is_checkpoint(entry):
                found.append(iteration)
        return sorted(found)

    def data_words(self, blend: Sequence[dict[str, Any]]) -> str:
        """The launch-line words that set a restart's data blend (config dicts with `prefix` and
        `weight`): Megatron-LM's `--data-path W1 P1 W2 P2 ...`, each prefix shell-quoted."""
        return megatron_data_path(blend)

    def exit_words(self, iteration: int) -> str:
        """The launch-line words that stop the job after `iteration`, saving a checkpoint first
        (Megatron-LM's `--exit-interval`; see forensics/rebuild/launches.py)."""
        return f"--exit-interval {iteration}"

    def pin_leads_flags(self, pin: str) -> bool:
        """Whether `pin` is itself a word of the launch line, put first in the restart file
        (a `--flag`; an override for a trainer configured by KEY=VALUE overrides), rather than an
        instruction shown beside it."""
        return pin.startswith("--")

    @abstractmethod
    def consequence(self, skipped: int) -> str:
        """One line: what the restarted job does differently from the original run after
        skipping `skipped` iterations."""

    def explain(self, flag: str, iterations: int) -> str | None:
        """A line that reads the written `flag` for a person, where its numbers are not the
        logged iterations it skips (`iterations` of them); None when they are."""
        return None

    def tracker_values(self, ranges: Sequence[Range]) -> list[int] | None:
        """The values a tracker file of skips would list (None: the trainer reads none)."""
        return None

    def parser_merge(
        self, ranges: Sequence[Range], schedule: Batches, checkpoint: int
    ) -> str | None:
        """Why the parser would merge two of the written ranges, or None when it keeps them."""
        return None

    def widen(self, ranges: list[Range], schedule: Batches, checkpoint: int) -> list[Range]:
        """`ranges` widened where the syntax cannot keep two of them apart (default: as they
        are)."""
        return ranges

    def help_entry(self) -> str:
        """How --trainer's help names this trainer."""
        return f"{self.name} {self.label}" if self.label else self.name


# -- helpers the trainers' parsers and spellings share ------------------------------------------


def flag_values(text: str, name: str) -> list[str]:
    """The words after the flag `name` in `text` (empty text: no values)."""
    tokens = text.split()
    if not tokens:
        return []
    if tokens[0] != name:
        raise ForensicsError(f"expected a flag string starting with {name}, got {tokens[0]!r}")
    return tokens[1:]


def nonneg_int(token: str, what: str) -> int:
    """`token` as a non-negative integer, as argparse's `type=int` would accept it here."""
    if not re.fullmatch(r"\d+", token):
        raise ForensicsError(f"{what}: not a non-negative integer: {token!r}")
    return int(token)


def megatron_data_path(blend: Iterable[dict[str, Any]]) -> str:
    """Megatron-LM's `--data-path W1 P1 W2 P2 ...`, each prefix shell-quoted so that
    `$(cat FILE)` and a pasted line keep it one word."""
    parts: list[str] = []
    for spec in blend:
        prefix = spec.get("remote") or spec["prefix"]  # a prefix in object storage: its URL
        parts += [f"{float(spec['weight']):g}", shlex.quote(str(prefix))]
    return "--data-path " + " ".join(parts)


def iterations_of(ranges: Iterable[Sequence[int]]) -> list[int]:
    """All iterations of inclusive ranges, sorted and unique."""
    return sorted({i for a, b in ranges for i in range(int(a), int(b) + 1)})
