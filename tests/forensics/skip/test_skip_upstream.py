"""The skip flags forensics writes, run through the trainers' own skip code (not our transcription).

`dataloaders/trainers/` transcribes each trainer's loop and `forensics.skip.flags` proves every
flag it writes on that transcription. Here the proof is redone on the trainers' source: NVIDIA
Megatron-LM's `iterations_to_skip` check and `dummy_train_step` (current and before megatron-core
0.17), BigScience Megatron-DeepSpeed's range parser and drain loop, and argonne-lcf
Megatron-DeepSpeed's pair parser and skipped step, vendored verbatim with repository, commit,
file:line and sha256 (tests/oracles/trainer_skip.py names them), exec'd with megatron-core's own
micro-batch calculator and rerun state machine and a stub model step. For each flag: which
batches the trainer drops and trains must be the plan's (taken from the run's schedule), and our
transcription must agree with the source draw for draw, counters included.

microsoft/Megatron-DeepSpeed and deepspeedai/Megatron-DeepSpeed (4efb479d53) have no flag that
skips training data (only `--skip-train`, which skips training altogether), so there is nothing to
run for them.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from oracles.trainer_skip import MIRROR, SPANS, Run, fetched_text, run_trainer, vendored

from dataloaders.run_sections import TrainingSpec
from dataloaders.schedule import Schedule
from dataloaders.trainers import (
    MEGATRON_DEEPSPEED,
    MEGATRON_DEEPSPEED_ARGONNE,
    MEGATRON_LM,
    MEGATRON_LM_PRE_017,
    get_trainer,
)
from forensics.errors import ForensicsError
from forensics.skip.flags import representable, write_flag
from forensics.skip.ranges import expand, merge_ranges

UPSTREAM = (MEGATRON_LM, MEGATRON_LM_PRE_017, MEGATRON_DEEPSPEED, MEGATRON_DEEPSPEED_ARGONNE)


def test_vendored_snippets_keep_their_citation_and_hash() -> None:
    from oracles.upstream.trainer_skip_snippets import SNIPPETS

    assert set(SNIPPETS) == set(SPANS)
    for name in SPANS:
        assert vendored(name)  # asserts the repository, commit, lines and sha256


def test_vendored_snippets_are_the_fetched_source() -> None:
    """Where the repositories were fetched (tools' `fetch`, under FORENSICS_UPSTREAM_MIRROR), the
    vendored text is the file's lines at the cited commit; offline, the hashes above hold it."""
    checked = 0
    for name, span in SPANS.items():
        text = fetched_text(span)
        if text is None:
            continue
        assert text == vendored(name), f"{name}: {span.repo} {span.commit} {span.path}"
        checked += 1
    if not checked:
        pytest.skip(f"no fetched copy of the trainers under {MIRROR}")


def _intervals(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(first, size) draws as merged half-open [first, end) intervals."""
    out: list[list[int]] = []
    for first, size in sorted(pairs):
        if out and first <= out[-1][1]:
            out[-1][1] = max(out[-1][1], first + size)
        else:
            out.append([first, first + size])
    return [(a, b) for a, b in out]


def _check(name: str, ranges: list[tuple[int, int]], schedule: Schedule, checkpoint: int) -> bool:
    """Run the flag forensics writes for `ranges` through the trainer's source and hold it to the
    plan; where forensics refuses to write one, run the string the trainer's syntax would give
    and hold the refusal to the source too (it must miss the plan). True when written."""
    trainer = get_trainer(name)
    flag = write_flag(trainer, ranges, schedule, checkpoint)
    text = flag.flag
    if text is None:
        assert flag.refusal
        try:
            text = trainer.spell(merge_ranges(expand(ranges)), schedule, checkpoint)
        except ForensicsError:
            return False  # no string at all (not a whole number of micro-batches)
    skip = set(expand(merge_ranges(expand(ranges))))
    first, size = schedule.first_sample, schedule.batch_size
    ramping = np.flatnonzero(size[checkpoint + 1 :] != schedule.training.global_batch_size)
    ramp_end = int(ramping[-1]) + checkpoint + 2 if ramping.size else 0
    last = min(max(max(skip) + 1, ramp_end), schedule.last_iteration)
    until = last + len(skip) if trainer.drains_uncounted else last
    start = schedule.loop_start(checkpoint)
    t = schedule.training
    run = Run(
        global_batch_size=t.global_batch_size,
        micro_batch_size=t.micro_batch_size,
        data_parallel_size=t.data_parallel_size,
        rampup=list(t.rampup_batch_size) if t.rampup_batch_size else None,
        iteration=checkpoint,
        consumed_samples=start.consumed_samples,
        train_iters=until,
    )
    theirs = run_trainer(name, text, run)
    # The plan, from the original run's schedule: its batches minus the skipped ones, in order.
    kept = [i for i in range(checkpoint + 1, last + 1) if i not in skip]
    want_trained = [(int(first[i]), int(size[i])) for i in kept]
    want_dropped = _intervals([(int(first[i]), int(size[i])) for i in skip])
    trained = [(f, s) for _, f, s in theirs.trained]
    end = int(first[last] + size[last])
    dropped = [(a, min(b, end)) for a, b in _intervals(theirs.dropped) if a < end]
    if flag.flag is None:  # refused: the trainer's source confirms the string would be wrong
        assert (trained[: len(kept)], dropped) != (want_trained, want_dropped), (name, text)
        return False
    assert trained[: len(kept)] == want_trained, (name, text)
    assert dropped == want_dropped, (name, text)
    labels = [it for it, _, _ in theirs.trained[: len(kept)]]
    if trainer.drains_uncounted:  # the counter does not count the drains: numbers shift
        assert labels == list(range(checkpoint + 1, checkpoint + 1 + len(kept))), name
    else:  # the numbers stay absolute: each kept batch is logged as in the original run
        assert labels == kept, name
    # Our transcription draws the same, counters included.
    ours = trainer.run(start, trainer.parse(text), until=until)
    assert [(d.iteration, d.first_sample, d.size) for d in ours.draws if d.trained] == (
        theirs.trained
    ), name
    ours_dropped = [(d.first_sample, d.size) for d in ours.draws if not d.trained]
    assert _intervals(ours_dropped) == _intervals(theirs.dropped), name
    assert (ours.iteration, ours.consumed_samples) == (theirs.iteration, theirs.consumed_samples)
    return True


def _schedule(gbs: int, mbs: int = 1, dp: int = 1, **kw) -> Schedule:
    kw.setdefault("train_iters", None if "train_samples" in kw else 300)
    return Schedule(
        TrainingSpec(global_batch_size=gbs, micro_batch_size=mbs, data_parallel_size=dp, **kw)
    )


@pytest.mark.parametrize("name", UPSTREAM)
@pytest.mark.parametrize(
    ("schedule", "ranges", "checkpoint"),
    [
        (_schedule(8, mbs=2), [(21, 22), (40, 40)], 20),  # gas 4
        (_schedule(6, dp=2), [(1, 1), (5, 7)], 0),  # dp 2, gas 3, from the start
        (_schedule(4, mbs=2, dp=2), [(51, 51), (90, 99)], 50),  # gas 1, right after the load
        (_schedule(16, mbs=2, dp=2), [(120, 121), (200, 210)], 100),  # gas 4, wide gap
    ],
    ids=["gas4", "dp2-from-start", "gas1-next", "gas4-wide"],
)
def test_trainer_source_skips_what_the_plan_says(name, schedule, ranges, checkpoint) -> None:
    chosen = representable(get_trainer(name), ranges, schedule, checkpoint)
    assert _check(name, chosen, schedule, checkpoint)


def test_trainer_source_inside_a_batch_size_ramp() -> None:
    """--rampup-batch-size 2 2 40 (global batch 8, dp 2): megatron-core's calculator sizes the
    batches; Megatron-LM's flags hold through the ramp, and where a Megatron-DeepSpeed flag
    cannot (a skipped step sized by the static DeepSpeed config, or drains that leave the
    counter that sizes the batch behind) forensics refuses, and the source confirms it."""
    schedule = _schedule(8, dp=2, train_samples=8 * 200, rampup_batch_size=(2, 2, 40))
    written = {name: _check(name, [(7, 8), (30, 30)], schedule, 5) for name in UPSTREAM}
    assert written == {
        MEGATRON_LM: True,
        MEGATRON_LM_PRE_017: True,
        MEGATRON_DEEPSPEED: False,
        MEGATRON_DEEPSPEED_ARGONNE: False,
    }


@pytest.mark.parametrize("seed", range(3))
def test_trainer_source_on_random_runs(seed: int) -> None:
    """Random batch shapes (some with a batch-size ramp), restarts and stretches: every flag
    forensics writes, run through each trainer's source, drops exactly the planned batches and
    trains the rest in order; every refusal, run the same way, would have missed the plan."""
    rng = random.Random(seed)
    written = refused = 0
    for _ in range(12):
        mbs, dp, gas = rng.choice([1, 2]), rng.choice([1, 2, 4]), rng.randint(1, 6)
        unit, ramp_steps = mbs * dp, gas - 1
        if ramp_steps and rng.random() < 0.3:  # --rampup-batch-size unit unit SAMPLES
            ramp = (unit, unit, rng.randint(1, 20) * ramp_steps)
            train = {"train_samples": unit * gas * 300, "rampup_batch_size": ramp}
            schedule = _schedule(unit * gas, mbs=mbs, dp=dp, **train)
        else:
            schedule = _schedule(unit * gas, mbs=mbs, dp=dp)
        checkpoint = rng.randint(0, 150)
        its = [i for i in range(checkpoint + 1, checkpoint + 100) if rng.random() < 0.1]
        if not its:
            continue
        chosen = rng.choice(UPSTREAM)  # the ranges are made for it; every trainer gets them
        ranges = representable(get_trainer(chosen), merge_ranges(its), schedule, checkpoint)
        for name in UPSTREAM:
            if _check(name, ranges, schedule, checkpoint):
                written += 1
            else:
                refused += 1
    assert written >= 30 and refused, (written, refused)


def test_the_source_tells_the_two_megatron_lm_checks_apart() -> None:
    """The check can fail: the current Megatron-LM flag given to a checkout before megatron-core
    0.17 (`iteration in` the list) drops the batch after each planned one."""
    schedule = _schedule(8, mbs=2)
    flag = write_flag(get_trainer(MEGATRON_LM), [(21, 21)], schedule, 20).flag
    start = schedule.loop_start(20)
    run = Run(8, 2, 1, None, 20, start.consumed_samples, 25)
    current = run_trainer(MEGATRON_LM, flag, run)
    old = run_trainer(MEGATRON_LM_PRE_017, flag, run)
    batch = int(schedule.first_sample[21]), int(schedule.batch_size[21])
    assert _intervals(current.dropped) == [(batch[0], batch[0] + batch[1])]
    assert _intervals(old.dropped) == [(batch[0] + batch[1], batch[0] + 2 * batch[1])]
