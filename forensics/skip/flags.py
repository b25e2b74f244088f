"""The skip flag for each trainer, proven by running that trainer's loop before it is written.

A restarted job loads checkpoint R and must train the same global batches as the original run,
minus the ones we skip. Each trainer is told so in its own syntax and semantics (the loops are
transcribed in `dataloaders.trainer_loops`, with the source lines):

- megatron-lm (megatron-core >= 0.17): `--iterations-to-skip k ...`, k = the logged iteration.
- megatron-lm-pre-0.17: the same flag, k = the logged iteration - 1 (completed steps).
- megatron-deepspeed (BigScience): `--skip-train-iteration-range a-b ...`; a range drains
  `b - iteration` MICRO-batches without advancing the counters, so a range is written in
  micro-batches (gas per global batch) and every range is shifted by the drains before it.
- megatron-deepspeed-argonne: `--train-range-to-skip a b ...`, inclusive pairs, whole steps.
- olmo-core: `--trainer.steps_to_skip=[{"start":a,"stop":b+1}]`, the experiment script's dotlist
  override of TrainerConfig.steps_to_skip (a list of StepSkipRange; stop exclusive).

Every string is checked by simulation: the trainer's loop is run from the restart with the parsed
string and must draw-and-drop exactly the intended batches and train every other batch of the
original run in order, with the original batch sizes. A string that cannot say that (ranges
too close for Megatron-DeepSpeed's merging parser, a drain inside a batch-size ramp) is refused
with the reason, never written approximately.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from dataloaders.schedule import Schedule
from dataloaders.trainer_loops import (
    FLAG_NAMES,
    MEGATRON_DEEPSPEED,
    MEGATRON_DEEPSPEED_ARGONNE,
    MEGATRON_LM,
    MEGATRON_LM_PRE_017,
    OLMO_CORE,
    TRAINERS,
    LoopStart,
    check_trainer,
    parse_skip_flag,
    run_loop,
)
from forensics.errors import ForensicsError
from forensics.skip.ranges import Range, expand, merge_ranges

SEMANTICS = {
    MEGATRON_LM: "NVIDIA Megatron-LM, megatron-core >= 0.17 (`(iteration + 1) in "
    "args.iterations_to_skip`): value k skips the batch logged as iteration k",
    MEGATRON_LM_PRE_017: "NVIDIA Megatron-LM before megatron-core 0.17 (`iteration in "
    "args.iterations_to_skip`): value k skips the batch logged as iteration k + 1",
    MEGATRON_DEEPSPEED: "BigScience Megatron-DeepSpeed: a range drains one micro-batch per "
    "iteration it spans (micro_batch_size x data_parallel_size samples) without advancing the "
    "iteration counter, so ranges are in micro-batches and shifted by earlier drains",
    MEGATRON_DEEPSPEED_ARGONNE: "argonne-lcf Megatron-DeepSpeed: pairs a b, iterations a..b "
    "inclusive (1-indexed); each draws a whole step of micro-batches and advances the counters",
    OLMO_CORE: "OLMo-core TrainerConfig.steps_to_skip: StepSkipRange(start, stop), steps "
    "start..stop-1 (1-indexed, stop exclusive); the batch is drawn, no forward/backward/optimizer",
}


def checkpoint_pin(trainer: str, checkpoint: int) -> str:
    """How to make the restarted job load checkpoint `checkpoint` and not the latest one (a
    checkpoint directory often holds checkpoints saved after the spike)."""
    if trainer in (MEGATRON_LM, MEGATRON_LM_PRE_017):
        # megatron/training/checkpointing.py:2026-2027 (d98e8a64dd), 1250 before b4e4d9618e
        return f"--ckpt-step {checkpoint}"
    if trainer in (MEGATRON_DEEPSPEED, MEGATRON_DEEPSPEED_ARGONNE):
        # megatron/checkpointing.py reads the iteration to load from this file (BigScience :112,
        # argonne :185); there is no flag for it
        return f"echo {checkpoint} > $LOAD/latest_checkpointed_iteration.txt"
    # allenai/OLMo-core fa6c5014 src/olmo_core/train/trainer.py:684-697: fit() loads the save
    # folder's LATEST checkpoint first and ignores load_path when it finds one, so restarting in
    # the old save folder resumes after the spike; checkpoint.py:85 names directories step{step}.
    # Not a flag (the new folder is the user's to name): shown beside the flags, never in them.
    return (
        f"restart in a NEW save folder: --trainer.save_folder=NEW "
        f"--trainer.load_path=<old save_folder>/step{checkpoint} (OLMo-core resumes the save "
        "folder's latest checkpoint and ignores load_path when the folder holds one)"
    )


def consequence(trainer: str, skipped: int) -> str:
    """One line: what the restarted job then does differently from the original run."""
    if trainer in (MEGATRON_LM, MEGATRON_LM_PRE_017):
        return (
            f"iteration numbers stay absolute; the learning-rate scheduler is not stepped on "
            f"the {skipped} skipped steps, so the schedule lags by {skipped} steps"
        )
    if trainer == MEGATRON_DEEPSPEED:
        return (
            f"logged iterations and consumed samples stay {skipped} batches behind the data, so "
            f"the data runs out {skipped} iterations before --train-iters (lower it by {skipped}); "
            "a checkpoint saved after a drain does not count it: restart from a later one only "
            "with these ranges again, and list this restart in training.applied_skips"
        )
    if trainer == MEGATRON_DEEPSPEED_ARGONNE:
        return "iteration numbers stay absolute; the lr scheduler still steps on skipped steps"
    return "step numbers stay absolute; global_step and tokens seen still advance"


@dataclass(frozen=True)
class TrainerFlag:
    """One trainer's skip flag for the plan, or why none can be written."""

    trainer: str
    flag: str | None  # None: refused
    values: list[int] | None  # what goes into a file the trainer reads (Megatron-LM's tracker)
    semantics: str
    consequence: str
    refusal: str | None = None
    pin: str | None = None  # loads the rollback checkpoint, not the latest (checkpoint_pin)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> TrainerFlag:
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})


def restart_line(flag: dict | TrainerFlag) -> str | None:
    """The line `restart-<trainer>.flags` holds, and every report's paste line: the checkpoint
    pin first where it is a flag (`--ckpt-step R`), then the skip flag; None when refused.
    A pin that is not a flag (a file to write, a config key) is shown beside it, never in it."""
    data = flag.to_dict() if isinstance(flag, TrainerFlag) else flag
    if not data.get("flag"):
        return None
    pin = data.get("pin") or ""
    return f"{pin} {data['flag']}" if pin.startswith("--") else str(data["flag"])


# -- writing ------------------------------------------------------------------------------------


def _spell(trainer: str, ranges: Sequence[Range], schedule: Schedule, checkpoint: int) -> str:
    """The flag text for `ranges` (no checks: `write_flag` proves it by simulation)."""
    name = FLAG_NAMES[trainer]
    if not ranges:
        return ""
    if trainer == MEGATRON_LM:
        return name + " " + " ".join(str(i) for i in expand(ranges))
    if trainer == MEGATRON_LM_PRE_017:
        return name + " " + " ".join(str(i - 1) for i in expand(ranges))
    if trainer == MEGATRON_DEEPSPEED_ARGONNE:
        return name + " " + " ".join(f"{a} {b}" for a, b in ranges)
    if trainer == OLMO_CORE:
        # one shell word (no spaces), so $(cat restart-olmo-core.flags) passes it whole; YAML
        # reads the JSON, and TrainerConfig.from_dict makes each item a StepSkipRange
        items = [{"start": a, "stop": b + 1} for a, b in ranges]
        return name + json.dumps(items, separators=(",", ":"))
    return (
        name + " " + " ".join(f"{a}-{b}" for a, b in deepspeed_ranges(ranges, schedule, checkpoint))
    )


def deepspeed_ranges(ranges: Sequence[Range], schedule: Schedule, checkpoint: int) -> list[Range]:
    """BigScience Megatron-DeepSpeed ranges that drain exactly the batches of `ranges`.

    When batch a is next, the counter is a - 1 minus the batches skipped before (a drain does not
    advance it); the range must start at counter + 1 and drain the micro-batches of batches a..b.
    """
    out: list[Range] = []
    skipped = 0
    unit = schedule.unit
    for a, b in ranges:
        samples = int(schedule.batch_size[a : b + 1].sum())
        if samples % unit:
            raise ForensicsError(
                f"iterations {a}-{b} hold {samples} samples, not a whole number of micro-batches "
                f"of {unit} (micro_batch_size x data_parallel_size)"
            )
        counter = a - 1 - skipped
        out.append((counter + 1, counter + samples // unit))
        skipped += b - a + 1
    return out


def write_flag(
    trainer: str, ranges: Sequence[Range], schedule: Schedule, checkpoint: int
) -> TrainerFlag:
    """The trainer's flag for skipping `ranges` on a restart from `start`, proven by running the
    trainer's loop; a refusal (flag None) with the reason when no string is exact."""
    check_trainer(trainer)
    ranges = merge_ranges(expand(ranges))
    n = len(expand(ranges))
    values = None
    if trainer in (MEGATRON_LM, MEGATRON_LM_PRE_017):
        values = [i - (trainer == MEGATRON_LM_PRE_017) for i in expand(ranges)]
    try:
        text = _spell(trainer, ranges, schedule, checkpoint)
        problem = _merged_by_parser(trainer, ranges, schedule, checkpoint) or verify_flag(
            trainer, text, ranges, schedule, checkpoint
        )
    except ForensicsError as err:
        problem = str(err)
    if problem:
        return TrainerFlag(
            trainer, None, None, SEMANTICS[trainer], consequence(trainer, n), refusal=problem
        )
    pin = checkpoint_pin(trainer, checkpoint)
    return TrainerFlag(trainer, text, values, SEMANTICS[trainer], consequence(trainer, n), pin=pin)


def _merged_by_parser(
    trainer: str, ranges: Sequence[Range], schedule: Schedule, checkpoint: int
) -> str | None:
    """Megatron-DeepSpeed's parser merges overlapping ranges: say which two, and the fix."""
    if trainer != MEGATRON_DEEPSPEED:
        return None
    written = deepspeed_ranges(ranges, schedule, checkpoint)
    for k in range(1, len(written)):
        if written[k - 1][1] >= written[k][0]:
            (a, b), (c, d) = ranges[k - 1], ranges[k]
            return (
                f"its parser would merge the ranges for iterations {a}-{b} and {c}-{d} "
                f"(written {written[k - 1][0]}-{written[k - 1][1]} and "
                f"{written[k][0]}-{written[k][1]} in micro-batches); with --trainer "
                f"{MEGATRON_DEEPSPEED} forensics skips the gap between them too"
            )
    return None


def write_all(
    chosen: str, ranges: Sequence[Range], schedule: Schedule, checkpoint: int
) -> dict[str, TrainerFlag]:
    """Every trainer's flag for the same ranges, the chosen trainer first."""
    order = [chosen] + [t for t in TRAINERS if t != chosen]
    return {t: write_flag(t, ranges, schedule, checkpoint) for t in order}


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
    trainer: str, text: str, start: LoopStart, until: int
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Run the trainer's loop on `text` from `start` until its counter reaches `until`: the
    sample intervals it drew and dropped (merged), and the batches it trained, in order."""
    result = run_loop(trainer, start, parse_skip_flag(trainer, text), until=until)
    dropped = _intervals(
        [(d.first_sample, d.first_sample + d.size) for d in result.draws if not d.trained]
    )
    trained = [(d.first_sample, d.size) for d in result.draws if d.trained]
    return dropped, trained


def verify_flag(
    trainer: str, text: str, ranges: Sequence[Range], schedule: Schedule, checkpoint: int
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
    until = last + len(skip) if trainer == MEGATRON_DEEPSPEED else last
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
            f"{FLAG_NAMES[trainer]} cannot say it exactly: its loop would train "
            f"(first sample, size) {got} where the original run trained {want}"
            + (" (inside the batch-size ramp)" if ramp else "")
        )
    if dropped != want_dropped:
        return (
            f"{FLAG_NAMES[trainer]} cannot say it exactly: its loop would drop samples "
            f"{_show(dropped)} instead of {_show(want_dropped)}"
        )
    return None


def _show(intervals: list[tuple[int, int]]) -> str:
    text = ", ".join(f"[{a}, {b})" for a, b in intervals[:3])
    return text + (f" and {len(intervals) - 3} more" if len(intervals) > 3 else "")


# -- choosing ranges every trainer can say ----------------------------------------------------


def representable(
    trainer: str, ranges: Sequence[Range], schedule: Schedule, checkpoint: int
) -> list[Range]:
    """`ranges`, widened where the chosen trainer's syntax cannot keep two of them apart.

    Only BigScience Megatron-DeepSpeed needs it: its parser merges overlapping ranges, and a
    range written in micro-batches spans gas times the iterations it skips, so the clean gap
    after a skipped stretch must be at least that long; a shorter gap is skipped as well (its
    cost shows in the collateral).
    """
    out = merge_ranges(expand(ranges))
    if trainer != MEGATRON_DEEPSPEED:
        return out
    while True:
        written = deepspeed_ranges(out, schedule, checkpoint)
        clash = next(
            (k for k in range(1, len(written)) if written[k - 1][1] >= written[k][0]), None
        )
        if clash is None:
            return out
        out[clash - 1 : clash + 1] = [(out[clash - 1][0], out[clash][1])]
