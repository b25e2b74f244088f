"""The restart of a rebuilt Megatron run as the sequence of launches the trainer needs.

Megatron-LM reads one `--data-path` per launch, so a rebuilt run whose remaining iterations span
several data stages is several launches: the restart from the rollback checkpoint with the blend
in force there, then one launch per later stage, each loading the checkpoint the launch before
it saved. A launch that must stop before a later stage gets `--exit-interval N` with N the last
iteration of its stage: Megatron-LM exits when `iteration % exit_interval == 0` and saves a
checkpoint first when `--save` is set (NVIDIA/Megatron-LM d98e8a64dd,
megatron/training/training.py:4130-4150; the field is training_config.py:73). The first
multiple of N the launch reaches is N itself (every launch starts at or before N), so it stops
exactly there. `--train-iters` stays the run's: it sizes the BlendedDataset
(training.py:5419-5431, `train_samples = train_iters * global_batch_size`), so lowering it
for an earlier stage would change every shuffle of that stage. The next launch resumes at the
consumed-samples count of that checkpoint, which is how `data.stages` is replayed: global
sample c is the new blend's sample c.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from dataloaders.trainers import Trainer
from dataloaders.trainers.base import megatron_data_path
from forensics.skip.flags import restart_words


@dataclass
class Launch:
    """One launch of the rebuilt run's restart.

    first, last   the iterations it trains (last None: to the end of training)
    load          the checkpoint iteration it loads (the rollback, then each launch's last)
    data_path     the trainer's words for its blend (Megatron-LM: `--data-path ...`, weights and
                  prefixes shell-quoted)
    changed       whether its blend differs from the original run's at these iterations
    file          the flags file in --out that holds its whole line
    """

    first: int
    last: int | None
    load: int
    data_path: str
    changed: bool
    file: str

    def flags(self, trainer: Trainer) -> tuple[str, str | None]:
        """(the flags file's line, a load instruction when the trainer's pin is not a flag)."""
        words = [self.data_path]
        if self.last is not None:
            words.append(trainer.exit_words(self.last))
        return restart_words(trainer, trainer.pin(self.load), " ".join(words))

    def describe(self, trainer: Trainer | None = None) -> str:
        """One line: which iterations, from which checkpoint, how it stops (`trainer`'s words
        for the stop; Megatron-LM's by default)."""
        if self.last:
            span = f"iterations {self.first}-{self.last}"
            words = trainer.exit_words(self.last) if trainer else "--exit-interval"
            stop = f"stops after iteration {self.last} ({words}, saving a checkpoint)"
        else:
            span, stop = f"iterations {self.first} to the end", "trains to the end of the run"
        order = "new data order" if self.changed else "the original data order (blend unchanged)"
        return f"{span}: loads checkpoint {self.load}, {stop}; {order}"


def data_path_line(blend: list[dict[str, Any]], trainer: Trainer | None = None) -> str:
    """The words that set a blend (config dicts, absolute prefixes) on `trainer`'s launch line:
    Megatron-LM's `--data-path W1 P1 W2 P2 ...` by default, each prefix shell-quoted so that
    `$(cat FILE)` and a pasted line keep it one word."""
    if trainer is None:
        return megatron_data_path(blend)
    return trainer.data_words(blend)


def launch_file(index: int, first: int) -> str:
    """The flags file of launch `index` (0-based): the first keeps the name every report cites."""
    return "restart-rebuilt.flags" if index == 0 else f"restart-rebuilt-from-{first}.flags"


def data_path_file(index: int, first: int) -> str:
    """The --data-path-only file of launch `index` (0-based)."""
    return "data_path.txt" if index == 0 else f"data_path-from-{first}.txt"


def same_blend(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """Whether two blends give the same BlendedDataset (same prefixes and weights, in order)."""
    key = [(str(s["prefix"]), float(s.get("weight", 1.0))) for s in a]
    return key == [(str(s["prefix"]), float(s.get("weight", 1.0))) for s in b]


def plan_launches(
    stages: list[dict[str, Any]],
    original: list[Any],
    resume: int,
    rollback: int,
    trainer: Trainer | None = None,
) -> list[Launch]:
    """The launches from `resume` on: one per rebuilt stage that starts at or after it.

    `stages` are the rebuilt run's stages (config dicts), `original` the run's DataStage list."""
    ahead = [s for s in stages if s["start_iteration"] >= resume]
    launches: list[Launch] = []
    for i, stage in enumerate(ahead):
        first = int(stage["start_iteration"])
        last = int(ahead[i + 1]["start_iteration"]) - 1 if i + 1 < len(ahead) else None
        before = [s for s in original if s.start_iteration <= first][-1]
        old = [d.model_dump(mode="json", exclude_none=True) for d in before.blend]
        launches.append(
            Launch(
                first=first,
                last=last,
                load=rollback if i == 0 else first - 1,
                data_path=data_path_line(stage["blend"], trainer),
                changed=not same_blend(stage["blend"], old),
                file=launch_file(i, first),
            )
        )
    return launches


def launches_note(launches: list[Launch]) -> str:
    """Which iterations keep their order, in one sentence."""
    kept = [x for x in launches if not x.changed]
    first_new = next((x.first for x in launches if x.changed), None)
    if not kept:
        return ""
    spans = ", ".join(f"{x.first}-{x.last}" if x.last else f"{x.first} on" for x in kept)
    return (
        f"Iterations {spans} keep the original run's batches (their blend holds no rebuilt "
        "dataset, so Megatron builds the same indices)"
        + (f"; the order changes from iteration {first_new} on." if first_new else ".")
    )


def paste_form(path: str, line: str) -> str:
    """How a flags file goes into the launch line: `$(cat FILE)` when its words hold no quotes
    (the shell splits a command substitution on blanks but removes no quotes); else through
    eval, which does, so a quoted path with a space stays one word."""
    word = shlex.quote(path)
    if shlex.split(line) == line.split():
        return f"$(cat {word})"
    return f'eval "<your launch command> $(cat {word})" (the file holds quoted paths)'
