"""Training iterations -> global sample ranges, as Megatron's training loop consumes them.

Iterations are 1-indexed. Iteration i consumes global samples [first_sample[i], first_sample[i] +
gbs[i]) where the global batch size is constant, or follows Megatron's `--rampup-batch-size START
INCR SAMPLES`, evaluated before every step from the consumed-samples count (megatron/training
num_microbatches_calculator.py, RampupBatchsizeNumMicroBatchesCalculator.update):

    per_increment = SAMPLES / ((GBS - START) // INCR)
    gbs = GBS                                              if consumed > SAMPLES
    gbs = START + int(consumed / per_increment) * INCR     otherwise

A ramp batch that is not a multiple of micro_batch_size * data_parallel_size is rounded down to one
(Megatron's --decrease-batch-size-if-needed; without that flag Megatron asserts divisibility, so a
run that trained had divisible sizes and the rounding is a no-op). A resume (`training.resumes`)
restarts the count: from that iteration on, samples continue at the checkpoint's consumed samples.
The data stage in force at iteration i is the last one whose start_iteration <= i; the global
sample index runs on across stages (the new blend is indexed at the same consumed-samples count).

A restart that applied skip flags (`training.applied_skips`) is replayed by running that
trainer's own loop (dataloaders.trainers) from the restart on: Megatron-LM, argonne and
OLMo-core draw a skipped step's batch (the row stays, marked `skipped`); BigScience
Megatron-DeepSpeed drains micro-batches without advancing its counters, so the drained samples
belong to no logged iteration (`drains`) and every later iteration of that restart trains data
further on than the plain schedule says.

The rampup phase is replayed step by step (it is short: SAMPLES / START steps at most); the
constant phase is vectorised, so a million-iteration run costs milliseconds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from dataloaders.base import check_iterations
from dataloaders.errors import ForensicsError
from dataloaders.run_sections import TrainingSpec
from dataloaders.trainers import Draw, LoopStart, get_trainer


class Schedule:
    """The whole run's iteration -> [first_sample, end_sample) map, with the stage per iteration.

    first_sample  int64[last_iteration + 1]  first global sample iteration i drew (index 0 unused)
    batch_size    int64[last_iteration + 1]  samples iteration i drew (the running gbs)
    skipped       bool[last_iteration + 1]   iteration i drew its batch but did not train on it
    consumed      int64[last_iteration + 1]  the trainer's consumed-samples count after iteration
                                             i (what checkpoint i restores; index 0: 0)
    drains        Megatron-DeepSpeed drains of earlier restarts: drawn, attributed to no iteration
    """

    def __init__(self, training: TrainingSpec, stage_starts: Sequence[int] = (1,)) -> None:
        self.training = training
        self.stage_starts = np.asarray(list(stage_starts), dtype=np.int64)
        self.unit = training.micro_batch_size * training.data_parallel_size
        if training.global_batch_size % self.unit:
            raise ForensicsError(
                f"training.global_batch_size {training.global_batch_size} is not a multiple of "
                f"micro_batch_size * data_parallel_size = {self.unit} (Megatron asserts this)"
            )
        self.last_iteration = self._train_iters()
        if len(self.stage_starts) and int(self.stage_starts[-1]) > self.last_iteration:
            raise ForensicsError(
                f"data stage starting at iteration {int(self.stage_starts[-1])} is after the end "
                f"of training ({self.last_iteration}); check start_iteration or train_iters"
            )
        for resume in training.resumes:
            if resume.iteration > self.last_iteration:
                raise ForensicsError(
                    f"training.resumes: iteration {resume.iteration} is after the end of "
                    f"training ({self.last_iteration})"
                )
        self.skipped = np.zeros(self.last_iteration + 1, dtype=bool)
        self.consumed = np.zeros(self.last_iteration + 1, dtype=np.int64)
        self.drains: list[Draw] = []
        self.first_sample, self.batch_size = self._build()

    # -- Megatron's formulas ---------------------------------------------------------------

    def _ramp_gbs(self, consumed: int) -> int:
        """The global batch size Megatron sets before a step, given consumed samples."""
        ramp = self.training.rampup_batch_size
        gbs = self.training.global_batch_size
        if ramp is None:
            return gbs
        start, incr, samples = ramp
        if consumed > samples:
            return gbs
        per_increment = samples / ((gbs - start) // incr)
        return start + int(consumed / per_increment) * incr

    def _running_gbs(self, consumed: int) -> int:
        gbs = self._ramp_gbs(consumed)
        if gbs % self.unit:
            gbs = (gbs // self.unit) * self.unit
        if gbs <= 0:
            raise ForensicsError(
                f"rampup batch size below micro_batch_size * data_parallel_size ({self.unit})"
            )
        return gbs

    def _train_iters(self) -> int:
        """train_iters, or Megatron's `update_train_iters` for sample-based training."""
        t = self.training
        if t.train_iters is not None:
            return t.train_iters
        assert t.train_samples is not None
        if t.rampup_batch_size is None:
            iters = t.train_samples // t.global_batch_size
        else:
            iters, consumed = 0, 0
            ramp_samples = t.rampup_batch_size[2]
            while consumed <= ramp_samples and consumed <= t.train_samples:
                consumed += self._ramp_gbs(consumed)
                iters += 1
            if t.train_samples > consumed:
                iters += (t.train_samples - consumed) // t.global_batch_size
        if iters < 1:
            raise ForensicsError(
                f"training.train_samples {t.train_samples} is less than one global batch"
            )
        return iters

    def _restarts(self) -> list[tuple[int, int | None, object]]:
        """(first iteration, consumed samples or None = as counted, applied skip or None)."""
        t = self.training
        out: list[tuple[int, int | None, object]] = [(1, 0, None)]
        out += [(r.iteration, r.consumed_samples, None) for r in t.resumes]
        for applied in t.applied_skips:
            if applied.resume_from >= self.last_iteration:
                raise ForensicsError(
                    f"training.applied_skips: resume_from {applied.resume_from} is not before "
                    f"the end of training ({self.last_iteration})"
                )
            out.append((applied.resume_from + 1, applied.consumed_samples, applied))
        return sorted(out, key=lambda r: r[0])

    def _build(self) -> tuple[np.ndarray, np.ndarray]:
        last = self.last_iteration
        first = np.zeros(last + 1, dtype=np.int64)
        gbs = np.zeros(last + 1, dtype=np.int64)
        ramp = self.training.rampup_batch_size
        ramp_samples = ramp[2] if ramp is not None else -1
        constant = self.training.global_batch_size
        restarts = self._restarts()
        counted = 0  # the trainer's consumed samples at the end of the previous segment
        for n, (begin, restored, applied) in enumerate(restarts):
            end = restarts[n + 1][0] if n + 1 < len(restarts) else last + 1
            consumed = counted if restored is None else restored
            if applied is not None:
                counted = self._replay_loop(applied, begin, end, consumed, first, gbs)
                continue
            i = begin
            while ramp is not None and consumed <= ramp_samples and i < end:
                g = self._running_gbs(consumed)
                first[i], gbs[i] = consumed, g
                consumed += g
                i += 1
            count = end - i
            first[i:end] = consumed + np.arange(count, dtype=np.int64) * constant
            gbs[i:end] = constant
            self.consumed[begin:end] = first[begin:end] + gbs[begin:end]
            counted = int(self.consumed[end - 1]) if end > begin else consumed
        return first, gbs

    def _replay_loop(
        self, applied, begin: int, end: int, consumed: int, first: np.ndarray, gbs: np.ndarray
    ) -> int:
        """Fill iterations begin..end-1 by running the applied skip's trainer loop; returns the
        trainer's consumed-samples count at the end."""
        start = LoopStart(
            iteration=begin - 1,
            consumed_samples=consumed,
            train_iters=self.last_iteration,
            unit=self.unit,
            global_batch_size=self.training.global_batch_size,
            batch_size_at=self._running_gbs,
        )
        trainer = get_trainer(applied.trainer)
        try:
            spec = trainer.parse(applied.flag)
        except ForensicsError as err:
            raise ForensicsError(f"training.applied_skips ({applied.trainer}): {err}") from None
        result = trainer.run(start, spec, until=end - 1)
        for draw in result.draws:
            if trainer.drains_uncounted and not draw.trained:
                self.drains.append(draw)
                continue
            i = draw.iteration
            first[i], gbs[i] = draw.first_sample, draw.size
            self.skipped[i] = not draw.trained
            self.consumed[i] = draw.consumed
        return result.consumed_samples

    # -- queries ---------------------------------------------------------------------------

    @property
    def total_samples(self) -> int:
        """Samples the train dataset is built for: train_samples, or train_iters * gbs."""
        t = self.training
        if t.train_samples is not None:
            return t.train_samples
        assert t.train_iters is not None
        return t.train_iters * t.global_batch_size

    def stage_of(self, iterations: np.ndarray) -> np.ndarray:
        """int32 index of the data stage in force at each iteration."""
        return (np.searchsorted(self.stage_starts, iterations, side="right") - 1).astype(np.int32)

    def check(self, first: int, last: int) -> None:
        check_iterations(first, last, self.last_iteration)

    def iteration_samples(self, first: int, last: int) -> pl.DataFrame:
        """Columns iteration, first_sample, end_sample (half-open), stage, skipped (drawn, not
        trained) for first..last."""
        self.check(first, last)
        its = np.arange(first, last + 1, dtype=np.int64)
        start = self.first_sample[first : last + 1]
        return pl.DataFrame(
            {
                "iteration": its,
                "first_sample": start,
                "end_sample": start + self.batch_size[first : last + 1],
                "stage": self.stage_of(its),
                "skipped": self.skipped[first : last + 1],
            }
        )

    def loop_start(self, checkpoint: int) -> LoopStart:
        """What a job restarted from checkpoint `checkpoint` begins from (its loop's state)."""
        if not 0 <= checkpoint < self.last_iteration:
            raise ForensicsError(
                f"checkpoint iteration {checkpoint} is not before the end of training "
                f"({self.last_iteration})"
            )
        return LoopStart(
            iteration=checkpoint,
            consumed_samples=int(self.consumed[checkpoint]) if checkpoint else 0,
            train_iters=self.last_iteration,
            unit=self.unit,
            global_batch_size=self.training.global_batch_size,
            batch_size_at=self._running_gbs,
        )
