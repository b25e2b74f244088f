"""BigScience Megatron-DeepSpeed's `--skip-train-iteration-range a-b ...`.

A range drains `b - iteration` MICRO-batches without advancing the counters, so a range is
written in micro-batches (gas per global batch) and every range is shifted by the drains before
it; the parser merges overlapping ranges, so two skipped stretches too close together cannot be
kept apart.

Sources read (repository, commit, file:line): bigscience-workshop/Megatron-DeepSpeed 8387ae17c4,
megatron/arguments.py:289-308 (sort, merge overlapping ranges only), megatron/training.py:884-899
(drop ranges ending before the loaded iteration with bisect_left; when
`start <= iteration + 1 <= end`, pop and call `next(train_data_iterator)` while
`iteration_for_skipping + 1 <= end`, i.e. end - iteration micro-batches, then `continue` (906)
without touching iteration or consumed samples), 913 (batch size from consumed samples), 931-935
(iteration and consumed samples advance after a trained step).

Which checkpoint the restart loads: megatron/checkpointing.py:276-278 hands `--load` to DeepSpeed's
`engine.load_checkpoint(load_dir)` (tag None), which loads the tag named in `load_dir/latest`
(deepspeedai/DeepSpeed edaa722126, deepspeed/runtime/engine.py:4304-4305; checkpoints are saved
as `global_step{global_steps}`, 4783); without --deepspeed, 290-319 read the iteration from
`latest_checkpointed_iteration.txt` and load `iter_{iteration:07d}` (95, 112). There is no flag
for either, and both files sit in the live checkpoint folder, so the pin is one shell line that
builds a NEW load folder holding links to the rollback checkpoint and both pointer files.
"""

from __future__ import annotations

import bisect
import collections
import re
from collections.abc import Sequence

from dataloaders.errors import ForensicsError
from dataloaders.trainers.base import Batches, Draw, LoopEnd, LoopStart, Range, Trainer, flag_values
from dataloaders.trainers.megatron_lm import MegatronLM


class MegatronDeepSpeed(Trainer):
    """BigScience Megatron-DeepSpeed: ranges of micro-batches, drained without counting."""

    name = "megatron-deepspeed"
    output_format = MegatronLM.output_format  # a fork: the same log and checkpoints
    label = "(BigScience)"
    flag = "--skip-train-iteration-range"
    semantics = (
        "BigScience Megatron-DeepSpeed: a range drains one micro-batch per "
        "iteration it spans (micro_batch_size x data_parallel_size samples) without advancing the "
        "iteration counter, so ranges are in micro-batches and shifted by earlier drains"
    )
    drains_uncounted = True

    def parse(self, text: str) -> list[tuple[int, int]]:
        """`a-b` pairs sorted, with overlapping ones merged (arguments.py:289-308)."""
        pairs = []
        for tok in flag_values(text, self.flag):
            m = re.fullmatch(r"(\d+)-(\d+)", tok)
            if not m:
                raise ForensicsError(f"{self.flag}: not a range start-end: {tok!r}")
            start, end = int(m.group(1)), int(m.group(2))
            if end < start:  # arguments.py:300 asserts this
                raise ForensicsError(f"{self.flag}: end of range {tok!r} is smaller than its start")
            pairs.append([start, end])
        pairs.sort()
        merged: list[list[int]] = []
        for start, end in pairs:
            if merged and merged[-1][1] >= start:
                merged[-1][1] = max(end, merged[-1][1])
            else:
                merged.append([start, end])
        return [(a, b) for a, b in merged]

    def loop(self, start: LoopStart, skip: Sequence, stop: int) -> LoopEnd:
        iteration, consumed, draws = start.iteration, start.consumed_samples, []
        position = consumed
        queue = collections.deque([list(r) for r in skip])
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

    def spell(self, ranges: Sequence[Range], schedule: Batches, checkpoint: int) -> str:
        if not ranges:
            return ""
        written = micro_batch_ranges(ranges, schedule, checkpoint)
        return self.flag + " " + " ".join(f"{a}-{b}" for a, b in written)

    def pin(self, checkpoint: int) -> str:
        tag = f"global_step{checkpoint}"
        return (
            f'N="$LOAD.rollback-{checkpoint}"; mkdir "$N" && ln -s "$LOAD/{tag}" '
            f'"$LOAD/iter_{checkpoint:07d}" "$N/" && echo {tag} > "$N/latest" && '
            f'echo {checkpoint} > "$N/latest_checkpointed_iteration.txt"  # then --load "$N" '
            "($LOAD: the job's --load folder, left as it is)"
        )

    def explain(self, flag: str, iterations: int) -> str | None:
        """The ranges count micro-batches, not iterations: say so with this flag's numbers."""
        drained = sum(b - a + 1 for a, b in self.parse(flag))
        if not iterations or not drained:
            return None
        return (
            f"the ranges count micro-batches (one next() of the data iterator: micro_batch_size x "
            f"data_parallel_size samples), not iterations: the {iterations} skipped iterations "
            f"are {drained} micro-batches, and each range starts where the iteration counter "
            "stands after the drains before it"
        )

    def consequence(self, skipped: int) -> str:
        return (
            f"logged iterations and consumed samples stay {skipped} batches behind the data, so "
            f"the data runs out {skipped} iterations before --train-iters (lower it by {skipped}); "
            "a checkpoint saved after a drain does not count it: restart from a later one only "
            "with these ranges again, and list this restart in training.applied_skips"
        )

    def parser_merge(
        self, ranges: Sequence[Range], schedule: Batches, checkpoint: int
    ) -> str | None:
        """The parser merges overlapping ranges: say which two, and the fix."""
        written = micro_batch_ranges(ranges, schedule, checkpoint)
        for k in range(1, len(written)):
            if written[k - 1][1] >= written[k][0]:
                (a, b), (c, d) = ranges[k - 1], ranges[k]
                return (
                    f"its parser would merge the ranges for iterations {a}-{b} and {c}-{d} "
                    f"(written {written[k - 1][0]}-{written[k - 1][1]} and "
                    f"{written[k][0]}-{written[k][1]} in micro-batches); with --trainer "
                    f"{self.name} forensics skips the gap between them too"
                )
        return None

    def widen(self, ranges: list[Range], schedule: Batches, checkpoint: int) -> list[Range]:
        """A range written in micro-batches spans gas times the iterations it skips, so the clean
        gap after a skipped stretch must be at least that long; a shorter gap is skipped as well
        (its cost shows in the collateral)."""
        out = list(ranges)
        while True:
            written = micro_batch_ranges(out, schedule, checkpoint)
            clash = next(
                (k for k in range(1, len(written)) if written[k - 1][1] >= written[k][0]), None
            )
            if clash is None:
                return out
            out[clash - 1 : clash + 1] = [(out[clash - 1][0], out[clash][1])]


def micro_batch_ranges(ranges: Sequence[Range], schedule: Batches, checkpoint: int) -> list[Range]:
    """The ranges that drain exactly the batches of `ranges` on a restart from `checkpoint`.

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
