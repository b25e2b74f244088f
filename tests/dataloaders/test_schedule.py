"""Iterations -> global samples: constant batches, Megatron's rampup (against megatron-core's
own batch-size calculator), resumes, data stages."""

from __future__ import annotations

import numpy as np
import pytest

from dataloaders.run_sections import TrainingSpec
from dataloaders.schedule import Schedule
from forensics.errors import ForensicsError


def _megatron_loop(spec: TrainingSpec, iters: int) -> tuple[list[int], list[int]]:
    """Megatron's training loop driven by megatron-core's own batch-size calculator
    (RampupBatchsizeNumMicroBatchesCalculator, decrease_batch_size_if_needed as a run that
    trained with a non-divisible ramp must have set it): before every step `update` from the
    consumed samples, then consume dp * micro_batch * num_microbatches
    (NVIDIA/Megatron-LM d98e8a64dd training.py:4602,4626 and the skip/step increments)."""
    calculator = pytest.importorskip("megatron.core.num_microbatches_calculator")
    unit = spec.micro_batch_size * spec.data_parallel_size
    if spec.rampup_batch_size is None:
        calc = calculator.ConstantNumMicroBatchesCalculator(
            spec.global_batch_size, spec.micro_batch_size, spec.data_parallel_size, False, 0
        )
    else:
        start, incr, ramp = spec.rampup_batch_size
        calc = calculator.RampupBatchsizeNumMicroBatchesCalculator(
            spec.global_batch_size, spec.micro_batch_size, spec.data_parallel_size, True, 0,
            start, incr, ramp,
        )  # fmt: skip
    firsts, sizes = [], []
    consumed = 0
    resumes = {r.iteration: r.consumed_samples for r in spec.resumes}
    for it in range(1, iters + 1):
        consumed = resumes.get(it, consumed)
        calc.update(consumed, consistency_check=False)
        gbs = calc.get() * unit
        firsts.append(consumed)
        sizes.append(gbs)
        consumed += gbs
    return firsts, sizes


def test_constant_batch() -> None:
    sched = Schedule(TrainingSpec(global_batch_size=1024, train_iters=100_000))
    table = sched.iteration_samples(1, 3)
    assert table["first_sample"].to_list() == [0, 1024, 2048]
    assert table["end_sample"].to_list() == [1024, 2048, 3072]
    assert sched.iteration_samples(100_000, 100_000)["first_sample"][0] == 99_999 * 1024
    assert sched.total_samples == 100_000 * 1024


@pytest.mark.parametrize("ramp", [(32, 32, 20_000), (16, 48, 10_000), (8, 8, 777), (100, 4, 5_000)])
def test_rampup_replayed_step_by_step(ramp) -> None:
    gbs = ramp[0] + ramp[1] * 5 if ramp != (100, 4, 5_000) else 120
    spec = TrainingSpec(global_batch_size=gbs, train_samples=200_000, rampup_batch_size=ramp)
    sched = Schedule(spec)
    firsts, sizes = _megatron_loop(spec, sched.last_iteration)
    np.testing.assert_array_equal(sched.first_sample[1:], firsts)
    np.testing.assert_array_equal(sched.batch_size[1:], sizes)
    assert sizes[0] == ramp[0] and sizes[-1] == gbs
    # Megatron's update_train_iters: the samples fit, and one more full batch would not.
    assert firsts[-1] + sizes[-1] <= 200_000 < firsts[-1] + sizes[-1] + gbs


def test_rampup_rounds_down_to_micro_batch_times_dp() -> None:
    spec = TrainingSpec(
        global_batch_size=96,
        micro_batch_size=2,
        data_parallel_size=4,
        train_samples=50_000,
        rampup_batch_size=(12, 12, 4_000),
    )
    sched = Schedule(spec)
    assert set(sched.batch_size[1:].tolist()) <= {8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96}
    firsts, sizes = _megatron_loop(spec, sched.last_iteration)
    np.testing.assert_array_equal(sched.batch_size[1:], sizes)


def test_resume_restarts_the_count() -> None:
    spec = TrainingSpec(
        global_batch_size=64,
        train_iters=1000,
        resumes=[{"iteration": 401, "consumed_samples": 30_000}],
    )
    sched = Schedule(spec)
    firsts, _ = _megatron_loop(spec, 1000)
    np.testing.assert_array_equal(sched.first_sample[1:], firsts)
    assert sched.first_sample[400] == 399 * 64 and sched.first_sample[401] == 30_000


def test_stages_by_iteration() -> None:
    sched = Schedule(TrainingSpec(global_batch_size=8, train_iters=100), [1, 50, 80])
    table = sched.iteration_samples(48, 81)
    assert table.filter(table["iteration"] == 49)["stage"][0] == 0
    assert table.filter(table["iteration"] == 50)["stage"][0] == 1
    assert table.filter(table["iteration"] == 81)["stage"][0] == 2
    assert table.filter(table["iteration"] == 50)["first_sample"][0] == 49 * 8  # continues


def test_bad_ranges_and_batches() -> None:
    sched = Schedule(TrainingSpec(global_batch_size=8, train_iters=10))
    with pytest.raises(ForensicsError, match="beyond the end of training"):
        sched.iteration_samples(5, 11)
    with pytest.raises(ForensicsError, match="before iteration 1"):
        sched.iteration_samples(0, 3)
    with pytest.raises(ForensicsError, match="not a multiple"):
        Schedule(TrainingSpec(global_batch_size=10, micro_batch_size=4, train_iters=10))
    with pytest.raises(ForensicsError, match="after the end of training"):
        Schedule(
            TrainingSpec(
                global_batch_size=8,
                train_iters=10,
                resumes=[{"iteration": 11, "consumed_samples": 5}],
            )
        )


def test_long_run_constant_phase_continues_the_ramp() -> None:
    spec = TrainingSpec(
        global_batch_size=2048,
        train_samples=2048 * 1_000_000,
        rampup_batch_size=(32, 32, 5_000_000),
    )
    sched = Schedule(spec)
    firsts, sizes = _megatron_loop(spec, 20_000)
    np.testing.assert_array_equal(sched.first_sample[1:20_001], firsts)
    last = sched.last_iteration
    assert sched.first_sample[last] == firsts[-1] + sizes[-1] + (last - 20_001) * 2048
    assert sched.first_sample[last] + 2048 <= spec.train_samples
