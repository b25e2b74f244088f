"""The skip flag for each trainer, proven by running that trainer's loop before it is written.

A restarted job loads checkpoint R and must train the same global batches as the original run,
minus the ones we skip. Each trainer is told so in its own syntax and semantics: its module in
`dataloaders.trainers` transcribes its loop (with the source lines) and spells its flag.

Every string is checked by simulation: the trainer's loop is run from the restart with the parsed
string and must draw-and-drop exactly the intended batches and train every other batch of the
original run in order, with the original batch sizes. A string that cannot say that (ranges
too close for Megatron-DeepSpeed's merging parser, a drain inside a batch-size ramp) is refused
with the reason, never written approximately.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from dataloaders.schedule import Schedule
from dataloaders.trainers import REGISTRY, LoopStart, Trainer, get_trainer
from forensics.errors import ForensicsError
from forensics.skip.ranges import Range, expand, merge_ranges


@dataclass(frozen=True)
class TrainerFlag:
    """One trainer's skip flag for the plan, or why none can be written."""

    trainer: str
    flag: str | None  # None: refused
    values: list[int] | None  # what goes into a file the trainer reads (Megatron-LM's tracker)
    semantics: str
    consequence: str
    refusal: str | None = None
    pin: str | None = None  # loads the rollback checkpoint, not the latest (Trainer.pin)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> TrainerFlag:
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})


def restart_words(trainer: Trainer, pin: str | None, words: str) -> tuple[str, str | None]:
    """The restart's launch-line words and the load instruction said beside them: `trainer`'s
    checkpoint pin goes first in the line where it is a word of it (`--ckpt-step R`, an
    override of an override-driven job), else it is said beside the line, never in it (None
    when it is in the line or there is none). Every restart line is made here:
    restart-<trainer>.flags, megatron_args.txt, the reports and rebuild's launches."""
    if pin and trainer.pin_leads_flags(pin):
        return f"{pin} {words}", None
    return words, pin or None


def flag_trainer(flag: dict | TrainerFlag) -> Trainer:
    """The trainer a flag was written for: a plan read back from skip.json names it."""
    data = flag.to_dict() if isinstance(flag, TrainerFlag) else flag
    return get_trainer(data["trainer"])


def restart_line(flag: dict | TrainerFlag) -> str | None:
    """The line `restart-<trainer>.flags` holds, and every report's paste line: the checkpoint
    pin first where it is a flag (`--ckpt-step R`), then the skip flag; None when refused."""
    data = flag.to_dict() if isinstance(flag, TrainerFlag) else flag
    if not data.get("flag"):
        return None
    return restart_words(flag_trainer(data), data.get("pin"), str(data["flag"]))[0]


def pin_beside(flag: dict | TrainerFlag) -> str | None:
    """The load instruction said beside the flag's restart line: its pin where that is not a
    word of the launch line (a file to write, a new save folder); None otherwise."""
    data = flag.to_dict() if isinstance(flag, TrainerFlag) else flag
    if not data.get("flag"):
        return None
    return restart_words(flag_trainer(data), data.get("pin"), str(data["flag"]))[1]


# -- writing ------------------------------------------------------------------------------------


def write_flag(
    loop: Trainer, ranges: Sequence[Range], schedule: Schedule, checkpoint: int
) -> TrainerFlag:
    """The trainer's flag for skipping `ranges` on a restart from `start`, proven by running the
    trainer's loop; a refusal (flag None) with the reason when no string is exact."""
    ranges = merge_ranges(expand(ranges))
    n = len(expand(ranges))
    values = loop.tracker_values(ranges)
    try:
        text = loop.spell(ranges, schedule, checkpoint)
        problem = loop.parser_merge(ranges, schedule, checkpoint) or verify_flag(
            loop, text, ranges, schedule, checkpoint
        )
    except ForensicsError as err:
        problem = str(err)
    if problem:
        # a trainer with no skip option still restarts from the rollback: its pin is kept
        pin = loop.pin(checkpoint) if loop.no_skip else None
        return TrainerFlag(
            loop.name, None, None, loop.semantics, loop.consequence(n), refusal=problem, pin=pin
        )
    pin = loop.pin(checkpoint)
    return TrainerFlag(loop.name, text, values, loop.semantics, loop.consequence(n), pin=pin)


def write_all(
    chosen: Trainer, ranges: Sequence[Range], schedule: Schedule, checkpoint: int
) -> dict[str, TrainerFlag]:
    """Every trainer's flag for the same ranges, the chosen trainer first."""
    order = [chosen] + [t for t in REGISTRY.values() if t.name != chosen.name]
    return {t.name: write_flag(t, ranges, schedule, checkpoint) for t in order}


# -- proving ------------------------------------------------------------------------------------


def _intervals(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Half-open sample intervals, merged."""
    out: list[list[int]] = []
    for lo, hi in sorted(pairs):
        if hi <= lo:
            continue
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(a, b) for a, b in out]


def dropped_and_trained(
    trainer: Trainer, text: str, start: LoopStart, until: int
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Run the trainer's loop on `text` from `start` until its counter reaches `until`: the
    sample intervals it drew and dropped (merged), and the batches it trained, in order."""
    result = trainer.run(start, trainer.parse(text), until=until)
    dropped = _intervals(
        [(d.first_sample, d.first_sample + d.size) for d in result.draws if not d.trained]
    )
    trained = [(d.first_sample, d.size) for d in result.draws if d.trained]
    return dropped, trained


def verify_flag(
    trainer: Trainer, text: str, ranges: Sequence[Range], schedule: Schedule, checkpoint: int
) -> str | None:
    """None when `text` makes `trainer` drop exactly the batches of `ranges` and train every
    other batch of the original run (from the restart to one past the last range) in order;
    otherwise what goes wrong, in one sentence."""
    skip = set(expand(ranges))
    if not skip:
        return None
    if min(skip) <= checkpoint:
        return f"iteration {min(skip)} is not after the restart checkpoint {checkpoint}"
    start = schedule.loop_start(checkpoint)
    if int(schedule.first_sample[checkpoint + 1]) != start.consumed_samples:
        return (
            f"a restart from checkpoint {checkpoint} resumes the data at sample "
            f"{start.consumed_samples}, not where iteration {checkpoint + 1} drew it "
            f"({int(schedule.first_sample[checkpoint + 1])}): an earlier Megatron-DeepSpeed drain "
            "is not counted in that checkpoint; restart from before the drain"
        )
    first, size = schedule.first_sample, schedule.batch_size
    # Inside a batch-size ramp a trainer whose counters lag after a skip sizes later batches
    # differently: follow the loop to the end of the ramp, not just past the last skip.
    ramping = np.flatnonzero(size[checkpoint + 1 :] != schedule.training.global_batch_size)
    ramp_end = int(ramping[-1]) + checkpoint + 2 if ramping.size else 0
    last = min(max(max(skip) + 1, ramp_end), start.train_iters)
    its = range(checkpoint + 1, last + 1)
    want_dropped = _intervals([(int(first[i]), int(first[i] + size[i])) for i in sorted(skip)])
    want_trained = [(int(first[i]), int(size[i])) for i in its if i not in skip]
    # A drain does not advance Megatron-DeepSpeed's counter: give its loop room to get as far.
    until = last + len(skip) if trainer.drains_uncounted else last
    dropped, trained = dropped_and_trained(trainer, text, start, until)
    end = int(first[last] + size[last])
    dropped = [(a, min(b, end)) for a, b in dropped if a < end]
    trained = trained[: len(want_trained)]
    if trained != want_trained:
        bad = next(
            (k for k, (x, y) in enumerate(zip(trained, want_trained, strict=False)) if x != y),
            min(len(trained), len(want_trained)),
        )
        got = trained[bad] if bad < len(trained) else "nothing"
        want = want_trained[bad] if bad < len(want_trained) else "nothing"
        ramp = bool((size[checkpoint + 1 : last + 1] != schedule.training.global_batch_size).any())
        return (
            f"{trainer.flag} cannot say it exactly: its loop would train "
            f"(first sample, size) {got} where the original run trained {want}"
            + (" (inside the batch-size ramp)" if ramp else "")
        )
    if dropped != want_dropped:
        return (
            f"{trainer.flag} cannot say it exactly: its loop would drop samples "
            f"{_show(dropped)} instead of {_show(want_dropped)}"
        )
    return None


def _show(intervals: list[tuple[int, int]]) -> str:
    text = ", ".join(f"[{a}, {b})" for a, b in intervals[:3])
    return text + (f" and {len(intervals) - 3} more" if len(intervals) > 3 else "")


# -- choosing ranges every trainer can say ----------------------------------------------------


def representable(
    trainer: Trainer, ranges: Sequence[Range], schedule: Schedule, checkpoint: int
) -> list[Range]:
    """`ranges`, widened where the chosen trainer's syntax cannot keep two of them apart
    (`Trainer.widen`: only BigScience Megatron-DeepSpeed's merging parser needs it)."""
    merged = merge_ranges(expand(ranges))
    return trainer.widen(merged, schedule, checkpoint)
