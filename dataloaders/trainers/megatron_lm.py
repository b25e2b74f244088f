"""NVIDIA Megatron-LM's `--iterations-to-skip`, before and after megatron-core 0.17.

Sources read (repository, commit, file:line):
- NVIDIA/Megatron-LM d98e8a64dd (2026-08), megatron/training/training.py:4602,4626
  `update_num_microbatches(args.consumed_train_samples, ...)` then 4648-4659
  `if (iteration + 1) in args.iterations_to_skip: dummy_train_step(...); iteration += 1;
  args.consumed_train_samples += batch_size; continue` (dummy_train_step, 2963-2983, draws
  `get_num_microbatches()` micro-batches). Before b4e4d9618e (PR #3957, 2026-03-20; megatron-core
  < 0.17) the test was `if iteration in args.iterations_to_skip:` (b4e4d9618e^ training.py:2903).
- megatron/training/checkpointing.py:2026-2027 (d98e8a64dd), 1250 before b4e4d9618e: `--ckpt-step`
  loads that iteration instead of the tracker's latest.
"""

from __future__ import annotations

from collections.abc import Sequence

from dataloaders.trainers.base import (
    Batches,
    Draw,
    LoopEnd,
    LoopStart,
    Range,
    Trainer,
    flag_values,
    iterations_of,
    nonneg_int,
)


class MegatronLM(Trainer):
    """Megatron-LM with megatron-core >= 0.17: value k skips the batch logged as iteration k."""

    name = "megatron-lm"
    label = "(megatron-core >= 0.17)"
    flag = "--iterations-to-skip"
    semantics = (
        "NVIDIA Megatron-LM, megatron-core >= 0.17 (`(iteration + 1) in "
        "args.iterations_to_skip`): value k skips the batch logged as iteration k"
    )
    reads_tracker = True
    output_format = "megatron"
    offset = 0  # logged iteration - value

    def parse(self, text: str) -> list[int]:
        return [nonneg_int(t, self.flag) for t in flag_values(text, self.flag)]

    def loop(self, start: LoopStart, skip: Sequence, stop: int) -> LoopEnd:
        values = {v + self.offset for v in skip}  # as logged iterations
        iteration, consumed, draws = start.iteration, start.consumed_samples, []
        position = consumed
        while iteration < stop:  # training.py:4554
            batch_size = start.batch_size_at(consumed)  # update_num_microbatches, 4602/4626
            skipped = (iteration + 1) in values  # 4648 (before 0.17: `iteration in` the list)
            consumed += batch_size  # 4657 (skipped) or after train_step
            draws.append(Draw(iteration + 1, position, batch_size, not skipped, consumed))
            position += batch_size
            iteration += 1  # 4653 (skipped) or after train_step
        return LoopEnd(draws, iteration, consumed, position)

    def tracker_values(self, ranges: Sequence[Range]) -> list[int]:
        return [i - self.offset for i in iterations_of(ranges)]

    def spell(self, ranges: Sequence[Range], schedule: Batches, checkpoint: int) -> str:
        if not ranges:
            return ""
        return self.flag + " " + " ".join(str(v) for v in self.tracker_values(ranges))

    def pin(self, checkpoint: int) -> str:
        return f"--ckpt-step {checkpoint}"

    def consequence(self, skipped: int) -> str:
        return (
            f"iteration numbers stay absolute; the learning-rate scheduler is not stepped on "
            f"the {skipped} skipped steps, so the schedule lags by {skipped} steps"
        )


class MegatronLMPre017(MegatronLM):
    """Megatron-LM before megatron-core 0.17: value k skips the batch logged as k + 1."""

    name = "megatron-lm-pre-0.17"
    label = ""
    semantics = (
        "NVIDIA Megatron-LM before megatron-core 0.17 (`iteration in "
        "args.iterations_to_skip`): value k skips the batch logged as iteration k + 1"
    )
    offset = 1
