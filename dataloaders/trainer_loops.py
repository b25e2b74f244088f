"""How each trainer's training loop draws data when it is told to skip iterations.

A skip flag is only right for the loop that reads it, and the loops disagree: on whether the
number is the step being taken or the steps completed, on whether a skipped step draws a global
batch or one micro-batch per "iteration", and on whether the counters advance. Each function
below transcribes one trainer's loop (the lines are cited) to the level that decides which samples
the data iterator yields and which of them are trained on. They serve three readers: the replay of
a run that already applied skips (`dataloaders.schedule`), `forensics check-skip` (what would this
string drop?), and the tests that hold every string we write against the loop that will read it.

Vocabulary. A *draw* is a contiguous run of global samples the data iterator yielded in one go
(a step's global batch, or a drain of several micro-batches). Samples are global sample indices,
as Megatron's pretraining sampler yields them from `consumed_samples` on; a restarted job's
sampler starts at the consumed-samples count restored from its checkpoint. `unit` is
micro_batch_size * data_parallel_size: what one `next(data_iterator)` yields across the
data-parallel ranks.

Sources read (repository, commit, file:line):
- NVIDIA/Megatron-LM d98e8a64dd (2026-08), megatron/training/training.py:4602,4626
  `update_num_microbatches(args.consumed_train_samples, ...)` then 4648-4659
  `if (iteration + 1) in args.iterations_to_skip: dummy_train_step(...); iteration += 1;
  args.consumed_train_samples += batch_size; continue` (dummy_train_step, 2963-2983, draws
  `get_num_microbatches()` micro-batches). Before b4e4d9618e (PR #3957, 2026-03-20; megatron-core
  < 0.17) the test was `if iteration in args.iterations_to_skip:` (b4e4d9618e^ training.py:2903).
- bigscience-workshop/Megatron-DeepSpeed 8387ae17c4, megatron/arguments.py:289-308 (sort, merge
  overlapping ranges only), megatron/training.py:884-899 (drop ranges ending before the loaded
  iteration with bisect_left; when `start <= iteration + 1 <= end`, pop and call
  `next(train_data_iterator)` while `iteration_for_skipping + 1 <= end`, i.e. end - iteration
  micro-batches, then `continue` (906) without touching iteration or consumed samples), 913
  (batch size from consumed samples), 931-935 (iteration and consumed samples advance after a
  trained step).
- argonne-lcf/Megatron-DeepSpeed ffa3456d68, megatron/training.py:1073-1085 (pairs from
  `--train-range-to-skip`), 1277 (batch size from consumed samples), 1295-1323 (a step in any
  inclusive range draws `gradient_accumulation_steps` micro-batches of the static DeepSpeed
  config and steps the lr scheduler), 1358-1365 (iteration and consumed samples advance for
  every step, skipped or not).
- allenai/OLMo-core fa6c5014c9, src/olmo_core/train/trainer.py:1477-1498 (`global_step += 1`
  for every batch, then `start <= global_step < stop` skips train_batch and optim_step; the batch
  was drawn and its tokens counted), src/olmo_core/train/common.py:275-283 (start 1-indexed,
  stop exclusive).
"""

from __future__ import annotations

import bisect
import collections
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dataloaders.errors import ForensicsError

MEGATRON_LM = "megatron-lm"
MEGATRON_LM_PRE_017 = "megatron-lm-pre-0.17"
MEGATRON_DEEPSPEED = "megatron-deepspeed"
MEGATRON_DEEPSPEED_ARGONNE = "megatron-deepspeed-argonne"
OLMO_CORE = "olmo-core"
TRAINERS = (
    MEGATRON_LM,
    MEGATRON_LM_PRE_017,
    MEGATRON_DEEPSPEED,
    MEGATRON_DEEPSPEED_ARGONNE,
    OLMO_CORE,
)

# The flag each trainer reads, as it is spelled on its command line.
FLAG_NAMES = {
    MEGATRON_LM: "--iterations-to-skip",
    MEGATRON_LM_PRE_017: "--iterations-to-skip",
    MEGATRON_DEEPSPEED: "--skip-train-iteration-range",
    MEGATRON_DEEPSPEED_ARGONNE: "--train-range-to-skip",
    # OLMo-core's experiment scripts take dotlist overrides: allenai/OLMo-core fa6c5014
    # src/olmo_core/internal/experiment.py:415 `config.merge(cli_context.overrides)`, each value
    # read by yaml.safe_load (src/olmo_core/config.py:361); TrainerConfig sits under `trainer`.
    OLMO_CORE: "--trainer.steps_to_skip=",
}


def check_trainer(name: str) -> str:
    """`name` if it is a trainer we know; a one-line error listing them otherwise."""
    if name not in TRAINERS:
        raise ForensicsError(f"unknown trainer {name!r}; known: {', '.join(TRAINERS)}")
    return name


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


# -- parsing the flags as each trainer's argument parser does -------------------------------------


def _values(text: str, name: str) -> list[str]:
    tokens = text.split()
    if not tokens:
        return []
    if tokens[0] != name:
        raise ForensicsError(f"expected a flag string starting with {name}, got {tokens[0]!r}")
    return tokens[1:]


def _int(token: str, what: str) -> int:
    if not re.fullmatch(r"\d+", token):
        raise ForensicsError(f"{what}: not a non-negative integer: {token!r}")
    return int(token)


def parse_skip_flag(trainer: str, text: str) -> list[tuple[int, int]] | list[int]:
    """The skip specification a trainer's parser makes of `text` (the flag as pasted).

    Megatron-LM: the list of values. BigScience Megatron-DeepSpeed: `a-b` pairs sorted, with
    overlapping ones merged (arguments.py:289-308). argonne: (a, b) pairs. OLMo-core:
    (start, stop) pairs from the override `--trainer.steps_to_skip=[{"start":A,"stop":B},...]`
    (or `steps_to_skip=` with that JSON, or the Python form `[StepSkipRange(start=A, stop=B)]`).
    """
    check_trainer(trainer)
    name = FLAG_NAMES[trainer]
    if trainer in (MEGATRON_LM, MEGATRON_LM_PRE_017):
        return [_int(t, name) for t in _values(text, name)]
    if trainer == MEGATRON_DEEPSPEED:
        pairs = []
        for tok in _values(text, name):
            m = re.fullmatch(r"(\d+)-(\d+)", tok)
            if not m:
                raise ForensicsError(f"{name}: not a range start-end: {tok!r}")
            start, end = int(m.group(1)), int(m.group(2))
            if end < start:  # arguments.py:300 asserts this
                raise ForensicsError(f"{name}: end of range {tok!r} is smaller than its start")
            pairs.append([start, end])
        pairs.sort()
        merged: list[list[int]] = []
        for start, end in pairs:
            if merged and merged[-1][1] >= start:
                merged[-1][1] = max(end, merged[-1][1])
            else:
                merged.append([start, end])
        return [(a, b) for a, b in merged]
    if trainer == MEGATRON_DEEPSPEED_ARGONNE:
        values = [_int(t, name) for t in _values(text, name)]
        if len(values) % 2:  # training.py:1074-1078 asserts an even count
            raise ForensicsError(f"{name}: expected pairs of values, got {len(values)} values")
        return list(zip(values[::2], values[1::2], strict=True))
    return _parse_olmo(text)


def _parse_olmo(text: str) -> list[tuple[int, int]]:
    body = re.sub(r"^(--)?(trainer\.)?steps_to_skip=", "", text.strip()).strip()
    if not body:
        return []
    if body.startswith("[{") or body == "[]":
        try:
            items = json.loads(body)
            return [(int(d["start"]), int(d["stop"])) for d in items]
        except (ValueError, KeyError, TypeError) as err:
            raise ForensicsError(f"steps_to_skip: not a JSON list of start/stop ({err})") from None
    found = re.findall(r"StepSkipRange\(\s*start\s*=\s*(\d+)\s*,\s*stop\s*=\s*(\d+)\s*\)", body)
    rest = re.sub(r"StepSkipRange\([^)]*\)|[\[\],\s]", "", body)
    if rest:
        raise ForensicsError(f"steps_to_skip: cannot read {body[:60]!r}")
    return [(int(a), int(b)) for a, b in found]


# -- the loops --------------------------------------------------------------------------------


def run_loop(trainer: str, start: LoopStart, skip: Sequence, until: int | None = None) -> LoopEnd:
    """Run `trainer`'s loop from `start` with the parsed skip specification `skip` until its
    iteration counter reaches `until` (default: train_iters)."""
    check_trainer(trainer)
    stop = start.train_iters if until is None else min(until, start.train_iters)
    if trainer in (MEGATRON_LM, MEGATRON_LM_PRE_017):
        return _megatron_lm(start, set(skip), stop, current=trainer == MEGATRON_LM)
    if trainer == MEGATRON_DEEPSPEED:
        return _bigscience(start, [list(r) for r in skip], stop)
    if trainer == MEGATRON_DEEPSPEED_ARGONNE:
        return _argonne(start, list(skip), stop)
    return _olmo_core(start, list(skip), stop)


def _megatron_lm(start: LoopStart, values: set[int], stop: int, current: bool) -> LoopEnd:
    iteration, consumed, draws = start.iteration, start.consumed_samples, []
    position = consumed
    while iteration < stop:  # training.py:4554
        batch_size = start.batch_size_at(consumed)  # update_num_microbatches, 4602/4626
        skipped = (iteration + 1) in values if current else iteration in values  # 4648
        consumed += batch_size  # 4657 (skipped) or after train_step
        draws.append(Draw(iteration + 1, position, batch_size, not skipped, consumed))
        position += batch_size
        iteration += 1  # 4653 (skipped) or after train_step
    return LoopEnd(draws, iteration, consumed, position)


def _bigscience(start: LoopStart, ranges: list[list[int]], stop: int) -> LoopEnd:
    iteration, consumed, draws = start.iteration, start.consumed_samples, []
    position = consumed
    queue = collections.deque(ranges)
    ends = [end for _, end in queue]  # training.py:884-888
    for _ in range(bisect.bisect_left(ends, iteration)):
        queue.popleft()
    while iteration < stop:  # 890
        if queue and queue[0][0] <= iteration + 1 <= queue[0][1]:  # 891-895
            _, end = queue.popleft()
            drained = end - iteration  # 899-905: next() while iteration_for_skipping + 1 <= end
            draws.append(Draw(iteration + 1, position, drained * start.unit, False, consumed))
            position += drained * start.unit
            continue  # 906: iteration and consumed samples unchanged
        batch_size = start.batch_size_at(consumed)  # 913
        draws.append(Draw(iteration + 1, position, batch_size, True, consumed + batch_size))
        position += batch_size
        iteration += 1  # 931
        consumed += batch_size  # 932-935
    return LoopEnd(draws, iteration, consumed, position)


def _argonne(start: LoopStart, pairs: list[tuple[int, int]], stop: int) -> LoopEnd:
    iteration, consumed, draws = start.iteration, start.consumed_samples, []
    position = consumed
    gas = (
        start.global_batch_size // start.unit
    )  # deepspeed_config_dict["gradient_accumulation_steps"]
    while iteration < stop:
        batch_size = start.batch_size_at(consumed)  # update_num_microbatches, 1277
        if any(a <= iteration + 1 <= b for a, b in pairs):  # 1295-1297
            draws.append(
                Draw(iteration + 1, position, gas * start.unit, False, consumed + batch_size)
            )
            position += gas * start.unit  # 1302-1305: `gas` micro-batches
        else:
            draws.append(Draw(iteration + 1, position, batch_size, True, consumed + batch_size))
            position += batch_size
        iteration += 1  # 1358
        consumed += batch_size  # 1365: dp * micro_batch * get_num_microbatches()
    return LoopEnd(draws, iteration, consumed, position)


def _olmo_core(start: LoopStart, ranges: list[tuple[int, int]], stop: int) -> LoopEnd:
    step, consumed, draws = start.iteration, start.consumed_samples, []
    position = consumed
    while step < stop:
        batch_size = start.batch_size_at(consumed)
        step += 1  # trainer.py:1479
        skipped = any(a <= step < b for a, b in ranges)  # 1488-1492
        consumed += batch_size
        draws.append(Draw(step, position, batch_size, not skipped, consumed))
        position += batch_size
    return LoopEnd(draws, step, consumed, position)
