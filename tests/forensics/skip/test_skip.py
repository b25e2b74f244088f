"""Skip flags against the trainers' loops.

The loops are transcribed in `dataloaders/trainers/` with their repository, commit and
file:line (NVIDIA/Megatron-LM d98e8a64dd training.py:4554-4659 and b4e4d9618e^ training.py:2903;
bigscience-workshop/Megatron-DeepSpeed 8387ae17c4 arguments.py:289-308, training.py:884-935;
argonne-lcf/Megatron-DeepSpeed ffa3456d68 training.py:1073-1085, 1295-1365; allenai/OLMo-core
fa6c5014c9 trainer.py:1477-1498, common.py:275-283). Three kinds of check here:
- worked examples read off those lines by hand (the numbers in the asserts are not computed by
  our code), so a transcription that drifts from the source fails;
- randomised runs (gas 1-8, rampup, restarts, earlier skips): every string we write, fed to its
  trainer's loop, draws-and-drops exactly the intended global batches (taken from the schedule,
  not from the writer) and trains every other batch in order;
- Megatron-LM's tracker file parsed by megatron-core's own
  RerunStateMachine.get_skipped_iterations_from_tracker_file.
The same flags run through the trainers' own source, vendored verbatim and exec'd:
test_skip_upstream.py.
"""

from __future__ import annotations

import random

import polars as pl
import pytest

from dataloaders.run_sections import AppliedSkip, TrainingSpec
from dataloaders.schedule import Schedule
from dataloaders.trainers import (
    MEGATRON_DEEPSPEED,
    MEGATRON_DEEPSPEED_ARGONNE,
    MEGATRON_LM,
    MEGATRON_LM_PRE_017,
    OLMO_CORE,
    TRAINERS,
    get_trainer,
    parse_skip_flag,
    run_loop,
)
from forensics.errors import ForensicsError
from forensics.skip import (
    collateral,
    expand,
    fingerprint_differences,
    merge_ranges,
    sample_ranges,
    select_iterations,
)
from forensics.skip.flags import dropped_and_trained, representable, write_all, write_flag
from forensics.skip.tracker import read_tracker, tracker_text


def _schedule(gbs: int = 8, mbs: int = 1, dp: int = 1, iters: int = 400, **kw) -> Schedule:
    return Schedule(
        TrainingSpec(
            global_batch_size=gbs,
            micro_batch_size=mbs,
            data_parallel_size=dp,
            train_iters=kw.pop("train_iters", iters) if "train_samples" not in kw else None,
            **kw,
        )
    )


def _batches(schedule: Schedule, its: list[int]) -> list[tuple[int, int]]:
    return [(int(schedule.first_sample[i]), int(schedule.batch_size[i])) for i in its]


# -- worked examples, read off the trainers' source ----------------------------------------------


def test_megatron_lm_current_and_pre_017_differ_by_one() -> None:
    sched = _schedule(gbs=8, iters=200)
    now = write_flag(get_trainer(MEGATRON_LM), [(101, 103)], sched, 100)
    old = write_flag(get_trainer(MEGATRON_LM_PRE_017), [(101, 103)], sched, 100)
    # training.py:4648 `(iteration + 1) in args.iterations_to_skip`: value k drops logged k.
    assert now.flag == "--iterations-to-skip 101 102 103"
    # before PR #3957 `iteration in args.iterations_to_skip`: value k drops logged k + 1.
    assert old.flag == "--iterations-to-skip 100 101 102"
    # The old string on a current Megatron-LM: one clean batch early, the last culprit trained.
    dropped, trained = dropped_and_trained(
        get_trainer(MEGATRON_LM), old.flag, sched.loop_start(90), 110
    )
    assert dropped == [(99 * 8, 102 * 8)] and (102 * 8, 8) in trained


def test_bigscience_drains_micro_batches_worked_example() -> None:
    # gas 4 (global batch 16, micro batch 2, data-parallel 2): one skipped iteration is 4
    # micro-batches. From checkpoint 10, skipping 11-12 must drain 8 micro-batches: the range
    # fires at iteration + 1 = 11 and drains end - 10 = 8, so it is 11-18. The counter stays at
    # 10; batch 13 is trained as logged 11, ... batch 20 as 18; to skip 21-22 the range starts
    # at counter 18 + 1 = 19 and drains 8: 19-26.
    sched = _schedule(gbs=16, mbs=2, dp=2, iters=100)
    flag = write_flag(get_trainer(MEGATRON_DEEPSPEED), [(11, 12), (21, 22)], sched, 10)
    assert flag.flag == "--skip-train-iteration-range 11-18 19-26"
    # A range in whole iterations (not micro-batches) drains only 2 / 4 of the first range's
    # samples and leaves the run off the batch boundaries.
    dropped, trained = dropped_and_trained(
        get_trainer(MEGATRON_DEEPSPEED),
        "--skip-train-iteration-range 11-12",
        sched.loop_start(10),
        20,
    )
    assert dropped == [(160, 168)] and trained[0] == (168, 16)


def test_bigscience_parser_merges_overlaps_and_drops_ranges_behind_the_restart() -> None:
    # arguments.py:303: merged when the previous end >= start; adjacent ranges stay apart.
    assert parse_skip_flag(MEGATRON_DEEPSPEED, "--skip-train-iteration-range 2-6 1-5") == [(1, 6)]
    assert parse_skip_flag(MEGATRON_DEEPSPEED, "--skip-train-iteration-range 1-5 6-7") == [
        (1, 5),
        (6, 7),
    ]
    sched = _schedule(gbs=4, mbs=4, iters=50)
    # training.py:884-888: a range ending before the loaded iteration is dropped at start; 12-13
    # fires once the counter is 11 (iteration + 1 = 12) and drains 13 - 11 = 2 micro-batches.
    dropped, _ = dropped_and_trained(
        get_trainer(MEGATRON_DEEPSPEED),
        "--skip-train-iteration-range 3-4 12-13",
        sched.loop_start(10),
        20,
    )
    assert dropped == [(44, 52)]


def test_bigscience_ranges_too_close_are_refused_or_widened() -> None:
    sched = _schedule(gbs=16, mbs=2, dp=2, iters=100)  # gas 4
    # 11-12 is written 11-18; 15 would start at counter 12 + 1 = 13 <= 18: the parser merges.
    refused = write_flag(get_trainer(MEGATRON_DEEPSPEED), [(11, 12), (15, 15)], sched, 10)
    assert (
        refused.flag is None
        and "would merge the ranges for iterations 11-12 and 15-15" in refused.refusal
    )
    # When it is the run's trainer, the gap is skipped too (the cost shows in the collateral).
    assert representable(get_trainer(MEGATRON_DEEPSPEED), [(11, 12), (15, 15)], sched, 10) == [
        (11, 15)
    ]
    assert representable(get_trainer(MEGATRON_LM), [(11, 12), (15, 15)], sched, 10) == [
        (11, 12),
        (15, 15),
    ]


def test_argonne_pairs_and_olmo_core_stop_exclusive() -> None:
    sched = _schedule(gbs=16, mbs=2, dp=2, iters=100)
    flags = write_all(get_trainer(MEGATRON_LM), [(11, 12), (15, 15)], sched, 10)
    # training.py:1295: `i <= (iteration + 1) <= j` for pairs (i, j): inclusive, 1-indexed.
    assert flags[MEGATRON_DEEPSPEED_ARGONNE].flag == "--train-range-to-skip 11 12 15 15"
    # trainer.py:1489: `start <= global_step < stop` after `global_step += 1`.
    assert flags[OLMO_CORE].flag == (
        '--trainer.steps_to_skip=[{"start":11,"stop":13},{"start":15,"stop":16}]'
    )
    assert parse_skip_flag(OLMO_CORE, "steps_to_skip=[StepSkipRange(start=11, stop=13)]") == [
        (11, 13)
    ]
    assert list(flags)[0] == MEGATRON_LM and set(flags) == set(TRAINERS)
    assert parse_skip_flag(OLMO_CORE, '[{"start": 11, "stop": 13}]') == [(11, 13)]


def test_ramp_refusals_name_the_ramp() -> None:
    # gbs 16 reached after 256 samples, ramping from 4 by 4; unit 4 (gas 1 at the start).
    sched = _schedule(gbs=16, mbs=2, dp=2, train_samples=2000, rampup_batch_size=(4, 4, 256))
    assert sched.batch_size[1] == 4 and sched.batch_size[60] == 16
    # Megatron-LM draws the same ramp batch it would have trained: exact.
    assert (
        write_flag(get_trainer(MEGATRON_LM), [(5, 6)], sched, 2).flag == "--iterations-to-skip 5 6"
    )
    # DeepSpeed's counters lag after a drain, so the batches after it are sized differently.
    ds = write_flag(get_trainer(MEGATRON_DEEPSPEED), [(5, 6)], sched, 2)
    assert ds.flag is None and "ramp" in ds.refusal
    # argonne drains the static gradient-accumulation steps (4 micro-batches), not the ramp's.
    assert write_flag(get_trainer(MEGATRON_DEEPSPEED_ARGONNE), [(5, 6)], sched, 2).flag is None
    # Past the ramp, all are exact again (but torchtitan, which has no skip option).
    flags = write_all(get_trainer(MEGATRON_LM), [(120, 121)], sched, 110).values()
    assert all(f.flag for f in flags if not get_trainer(f.trainer).no_skip)


# -- randomised: every written string drops exactly the intended batches -----------------------


def _random_run(rng: random.Random) -> Schedule:
    mbs, dp, gas = rng.choice([1, 2]), rng.choice([1, 2, 4]), rng.randint(1, 8)
    gbs = mbs * dp * gas
    if rng.random() < 0.3:
        start = mbs * dp
        incr = mbs * dp
        steps = (gbs - start) // incr
        if steps:
            ramp = (start, incr, rng.randint(1, 20) * steps)
            return _schedule(
                gbs=gbs, mbs=mbs, dp=dp, train_samples=gbs * 300, rampup_batch_size=ramp
            )
    return _schedule(gbs=gbs, mbs=mbs, dp=dp, iters=300)


@pytest.mark.parametrize("seed", range(6))
def test_written_flags_drop_exactly_the_intended_batches(seed: int) -> None:
    rng = random.Random(seed)
    written = refused = 0
    for _ in range(40):
        sched = _random_run(rng)
        checkpoint = rng.randint(0, 150)
        density = rng.random() * 0.3
        its = [i for i in range(checkpoint + 1, checkpoint + 100) if rng.random() < density]
        trainer = rng.choice(TRAINERS)
        ranges = representable(get_trainer(trainer), merge_ranges(its), sched, checkpoint)
        flags = write_all(get_trainer(trainer), ranges, sched, checkpoint)
        skip = set(expand(ranges))
        last = max(skip, default=checkpoint) + 1
        want_trained = _batches(
            sched, [i for i in range(checkpoint + 1, last + 1) if i not in skip]
        )
        want_dropped = sorted(_batches(sched, sorted(skip)))
        for name, flag in flags.items():
            if flag.flag is None:
                refused += 1
                assert flag.refusal
                continue
            written += 1
            until = last + len(skip) if name == MEGATRON_DEEPSPEED else last
            result = run_loop(
                name, sched.loop_start(checkpoint), parse_skip_flag(name, flag.flag), until
            )
            trained = [(d.first_sample, d.size) for d in result.draws if d.trained]
            assert trained[: len(want_trained)] == want_trained, (name, flag.flag)
            drops = [
                (d.first_sample, d.first_sample + d.size) for d in result.draws if not d.trained
            ]
            covered = (
                sorted(
                    s
                    for a, b in drops
                    for s in range(a, b)
                    if s < want_trained[-1][0] + want_trained[-1][1]
                )
                if want_trained
                else []
            )
            assert covered == sorted(s for a, n in want_dropped for s in range(a, a + n)), name
        # The chosen trainer's string is always written (the ranges were made for it), except
        # where a batch-size ramp makes its syntax inexact or the trainer has no skip option.
        ramp = bool(
            (sched.batch_size[checkpoint + 1 : last + 1] != sched.training.global_batch_size).any()
        )
        no_option = get_trainer(trainer).no_skip  # torchtitan: refused in one line
        assert flags[trainer].flag is not None or ramp or not skip or no_option
        if skip and flags[MEGATRON_LM].flag and flags[MEGATRON_LM_PRE_017].flag:
            now = flags[MEGATRON_LM].flag.split()[1:]
            old = flags[MEGATRON_LM_PRE_017].flag.split()[1:]
            assert [int(a) - int(b) for a, b in zip(now, old, strict=True)] == [1] * len(now)
    assert written > refused


# -- the run's own history ----------------------------------------------------------------------


def test_applied_megatron_lm_skips_keep_numbers_and_mark_rows() -> None:
    spec = TrainingSpec(
        global_batch_size=8,
        train_iters=100,
        applied_skips=[
            AppliedSkip(trainer=MEGATRON_LM, resume_from=40, flag="--iterations-to-skip 45 46")
        ],
    )
    sched = Schedule(spec)
    plain = _schedule(gbs=8, iters=100)
    assert (sched.first_sample == plain.first_sample).all()
    frame = sched.iteration_samples(44, 47)
    assert frame["skipped"].to_list() == [False, True, True, False]
    # A new rollback before them composes them in: the restart must skip them again.
    from forensics.skip.plan import plan_flags

    ranges, composed, _, flags = plan_flags(get_trainer(MEGATRON_LM), [50], sched, 30)
    assert composed == [45, 46] and ranges == [(45, 46), (50, 50)]
    assert flags[MEGATRON_LM].flag == "--iterations-to-skip 45 46 50"


def test_applied_bigscience_skips_shift_the_data() -> None:
    # gas 4; an earlier restart from 10 drained batches 11-12 with the right string (11-18):
    # logged iteration 11 of that restart trained original batch 13.
    spec = TrainingSpec(
        global_batch_size=16,
        micro_batch_size=2,
        data_parallel_size=2,
        train_iters=100,
        applied_skips=[
            AppliedSkip(
                trainer=MEGATRON_DEEPSPEED,
                resume_from=10,
                flag="--skip-train-iteration-range 11-18",
            )
        ],
    )
    sched = Schedule(spec)
    assert int(sched.first_sample[11]) == 12 * 16
    assert not sched.skipped.any() and [(d.first_sample, d.size) for d in sched.drains] == [
        (160, 32)
    ]
    # Its checkpoints count consumed samples without the drain: a rollback to 20 would resume
    # 32 samples early, so no flag is exact there.
    assert int(sched.consumed[20]) == 20 * 16
    refused = write_flag(get_trainer(MEGATRON_LM), [(30, 30)], sched, 20)
    assert refused.flag is None and "drain" in refused.refusal


def test_unknown_trainer_is_a_one_line_error() -> None:
    with pytest.raises(ForensicsError, match="unknown trainer 'megatron'"):
        write_flag(get_trainer("megatron"), [(5, 5)], _schedule(), 1)
    with pytest.raises(ValueError, match="unknown trainer"):
        TrainingSpec(global_batch_size=8, train_iters=10, trainer="nemo")


# -- Megatron-LM's tracker file, read by megatron-core itself ------------------------------------


def test_tracker_file_parsed_by_megatron_core(tmp_path) -> None:
    rerun = pytest.importorskip("megatron.core.rerun_state_machine")
    values = [2201, 2202, 2260, 5]
    path = tmp_path / "iterations_to_skip.tracker"
    path.write_text(tracker_text(values, "2026-12-02 03:00:00.000000"))
    real = rerun.RerunStateMachine.get_skipped_iterations_from_tracker_file(str(path))
    assert real == sorted(values) == read_tracker(path.read_text())
    # The same rules on a file the trainer wrote: once is not enough, two ranks of one job veto.
    record = (
        "ts=t node=n device=0 jobID=7 rank={rank} iteration={it} "
        "status=RerunValidationStatus.RERUN_DISABLED result=nan message='x'"
    )
    seen = [(0, 10), (0, 10), (0, 11), (0, 12), (0, 12), (1, 12)]
    lines = [record.format(rank=r, it=i) for r, i in seen]
    path.write_text("\n".join(lines) + "\n")
    real = rerun.RerunStateMachine.get_skipped_iterations_from_tracker_file(str(path))
    assert real == read_tracker(path.read_text()) == [10]


# -- choosing and costing -----------------------------------------------------------------------


def _exposure() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "iteration": [101, 102, 103, 104, 105, 106],
            "samples": [8, 8, 8, 8, 8, 8],
            "flagged_samples": [0, 1, 4, 0, 8, 2],
        }
    )


def test_select_and_collateral_are_true_counts() -> None:
    exp = _exposure()
    assert select_iterations(exp) == [102, 103, 105, 106]
    assert select_iterations(exp, threshold=0.25) == [103, 105]
    ranges = merge_ranges(select_iterations(exp, threshold=0.25))
    assert ranges == [(103, 103), (105, 105)]
    col = collateral(exp, ranges)
    assert col["clean_samples_skipped"] == 4 + 0
    assert col["culprit_samples_missed"] == 1 + 2
    assert col["culprit_iterations_missed"] == 2
    with pytest.raises(ForensicsError, match="threshold"):
        select_iterations(exp, threshold=1.0)


def test_merge_and_expand() -> None:
    assert merge_ranges([5, 3, 4, 9, 10, 12]) == [(3, 5), (9, 10), (12, 12)]
    assert expand([(3, 5), (9, 10)]) == [3, 4, 5, 9, 10]
    assert merge_ranges([]) == []


def test_sample_ranges_are_half_open_and_merged() -> None:
    its = pl.DataFrame(
        {"iteration": [1, 2, 3, 4], "first_sample": [0, 4, 12, 20], "end_sample": [4, 12, 20, 28]}
    )
    assert sample_ranges(its, [(1, 1), (3, 4)]) == [[0, 4], [12, 28]]


def test_fingerprint_differences_name_the_field() -> None:
    a = {"config_hash": "abc", "files": [{"size": 10, "idx_sha256": "x"}]}
    b = {"config_hash": "abd", "files": [{"size": 11, "idx_sha256": "x"}]}
    diffs = fingerprint_differences(a, b)
    assert len(diffs) == 2 and diffs[0].startswith("config_hash") and "files[0].size" in diffs[1]
    assert fingerprint_differences(a, a) == []


def test_flag_parsers_reject_garbage() -> None:
    with pytest.raises(ForensicsError, match="iterations-to-skip"):
        parse_skip_flag(MEGATRON_LM, "--iterations-to-skip 5 x")
    with pytest.raises(ForensicsError, match="smaller than its start"):
        parse_skip_flag(MEGATRON_DEEPSPEED, "--skip-train-iteration-range 9-3")
    with pytest.raises(ForensicsError, match="starting with"):
        parse_skip_flag(MEGATRON_LM, "--skip-train-iteration-range 1-2")
    with pytest.raises(ForensicsError, match="pairs"):
        parse_skip_flag(MEGATRON_DEEPSPEED_ARGONNE, "--train-range-to-skip 1 2 3")
    assert parse_skip_flag(MEGATRON_LM, "") == []
