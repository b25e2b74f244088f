"""argonne-lcf Megatron-DeepSpeed's `--train-range-to-skip a b ...`: inclusive pairs of whole
steps, 1-indexed; a skipped step draws a whole step of micro-batches and advances the counters.

Sources read (repository, commit, file:line): argonne-lcf/Megatron-DeepSpeed ffa3456d68,
megatron/training.py:1073-1085 (pairs from `--train-range-to-skip`), 1277 (batch size from
consumed samples), 1295-1323 (a step in any inclusive range draws `gradient_accumulation_steps`
micro-batches of the static DeepSpeed config and steps the lr scheduler), 1358-1365 (iteration
and consumed samples advance for every step, skipped or not); megatron/arguments.py:1870-1875
`--load-tag` ("Specific checkpoint tag to load. Ignores latest."), passed as `tag=` to DeepSpeed's
`engine.load_checkpoint` (megatron/checkpointing.py:694-705; DeepSpeed names a checkpoint
`global_step{global_steps}`, deepspeedai/DeepSpeed edaa722126 deepspeed/runtime/engine.py:4783).
The fork's launchers run with --deepspeed, where that flag pins the checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence

from dataloaders.errors import ForensicsError
from dataloaders.trainers.base import (
    Batches,
    Draw,
    LoopEnd,
    LoopStart,
    Range,
    Trainer,
    flag_values,
    nonneg_int,
)
from dataloaders.trainers.megatron_lm import MegatronLM


class MegatronDeepSpeedArgonne(Trainer):
    """argonne-lcf Megatron-DeepSpeed: inclusive pairs of whole steps, counters advance."""

    name = "megatron-deepspeed-argonne"
    output_format = MegatronLM.output_format  # a fork: the same log and checkpoints
    flag = "--train-range-to-skip"
    semantics = (
        "argonne-lcf Megatron-DeepSpeed: pairs a b, iterations a..b "
        "inclusive (1-indexed); each draws a whole step of micro-batches and advances the counters"
    )

    def parse(self, text: str) -> list[tuple[int, int]]:
        values = [nonneg_int(t, self.flag) for t in flag_values(text, self.flag)]
        if len(values) % 2:  # training.py:1074-1078 asserts an even count
            raise ForensicsError(f"{self.flag}: expected pairs of values, got {len(values)} values")
        return list(zip(values[::2], values[1::2], strict=True))

    def loop(self, start: LoopStart, skip: Sequence, stop: int) -> LoopEnd:
        pairs = list(skip)
        iteration, consumed, draws = start.iteration, start.consumed_samples, []
        position = consumed
        gas = (
            start.global_batch_size // start.unit
        )  # deepspeed_config "gradient_accumulation_steps"
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

    def spell(self, ranges: Sequence[Range], schedule: Batches, checkpoint: int) -> str:
        if not ranges:
            return ""
        return self.flag + " " + " ".join(f"{a} {b}" for a, b in ranges)

    def pin(self, checkpoint: int) -> str:
        return f"--load-tag global_step{checkpoint}"

    def consequence(self, skipped: int) -> str:
        return "iteration numbers stay absolute; the lr scheduler still steps on skipped steps"
