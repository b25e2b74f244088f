"""The rollback rule: latest checkpoint in [S-100, S-50], else older, else S-100 with a note."""

from __future__ import annotations

import re

import pytest

from dataloaders.trainers.megatron_lm import MegatronLM
from forensics.rollback import recommend_rollback


@pytest.mark.parametrize(
    ("checkpoints", "expected", "rule"),
    [
        ([1000, 1100, 1150, 1200], 1150, "window"),  # 1150 in [1134, 1184]; 1200 too late
        ([1000, 1134, 1184], 1184, "window"),  # both ends inclusive
        ([1000, 1133, 1185, 1200], 1133, "older"),  # nothing in the window: latest before
        ([1185, 1200], 1134, "no-checkpoint"),  # all too late: S-100 as a target
        ([], 1134, "no-checkpoint"),
    ],
)
def test_rule_branches(checkpoints: list[int], expected: int, rule: str) -> None:
    rb = recommend_rollback(1234, checkpoints)
    assert (rb.iteration, rb.rule) == (expected, rule)
    assert rb.checkpoint == (rule != "no-checkpoint")
    assert rb.resume_iteration == expected + 1


def test_no_checkpoint_notes_say_why() -> None:
    assert "no checkpoint list was given" in recommend_rollback(1234, []).note
    assert "no listed checkpoint" in recommend_rollback(1234, [1200]).note


def test_early_spike_clamps_at_zero() -> None:
    rb = recommend_rollback(60, [])
    assert rb.iteration == 0 and rb.resume_iteration == 1


def test_culprit_onset_chooses_the_latest_checkpoint_before_it() -> None:
    """Checkpoints every 50, culprit first seen at 420, spike at 449: 400, not the fixed
    window's 350 (50 iterations of clean training kept), and the note names the rule."""
    every_50 = range(0, 449, 50)
    rb = recommend_rollback(449, every_50, onset=420)
    assert (rb.iteration, rb.rule, rb.checkpoint) == (400, "evidence", True)
    assert rb.before == 420 and rb.onset == 420
    assert rb.note.startswith("rule: the latest checkpoint before the culprit's first document")
    assert recommend_rollback(449, every_50).iteration == 350  # nothing known: the fallback
    assert "fixed fallback" in recommend_rollback(449, every_50).note
    # A checkpoint at the onset itself already trained on it (state after iteration 420).
    assert recommend_rollback(449, [400, 420], onset=420).iteration == 400
    assert recommend_rollback(449, [400, 419], onset=420).iteration == 419
    # An onset long before the fixed window: before it, however far back.
    assert recommend_rollback(1234, [900, 1000, 1150], onset=1100).iteration == 1000


def test_an_earlier_warning_moves_the_rollback_before_it() -> None:
    from forensics.rollback import Mark

    alarm = Mark(380, "the grad-norm alarm")
    rb = recommend_rollback(449, range(0, 449, 50), onset=420, warnings=[alarm])
    assert (rb.iteration, rb.before) == (350, 380)
    assert "grad-norm alarm (iteration 380), which came before the culprit's first" in rb.note
    late = Mark(440, "the grad-norm alarm")  # after the onset: the onset decides
    assert recommend_rollback(449, range(0, 449, 50), onset=420, warnings=[late]).iteration == 400
    # Without an onset, a warning at or before the fallback's checkpoint moves it earlier.
    switch = Mark(340, "the data stage switch")
    rb = recommend_rollback(449, range(0, 449, 50), warnings=[switch])
    assert (rb.iteration, rb.rule) == (300, "warning") and "data stage switch" in rb.note
    # ... and one after it leaves the fallback as it is.
    rb = recommend_rollback(449, range(0, 449, 50), warnings=[Mark(445, "the grad-norm alarm")])
    assert (rb.iteration, rb.rule) == (350, "window")


def test_evidence_without_a_checkpoint_before_it_is_a_target() -> None:
    rb = recommend_rollback(449, [430], onset=420)
    assert (rb.iteration, rb.checkpoint, rb.rule) == (419, False, "no-checkpoint")
    assert "no listed checkpoint is before iteration 420" in rb.note
    assert "no checkpoint list was given" in recommend_rollback(449, [], onset=420).note


def test_triage_and_spike_agree_on_the_window() -> None:
    """triage's `next_command`, the watcher and spike's default use one rule (spike_window)."""
    from forensics.spike import SpikeOptions
    from forensics.window import SPIKE_WINDOW, spike_window

    assert SpikeOptions(step=5000).window == SPIKE_WINDOW
    window, why = spike_window(5000, 4940)
    assert window == SPIKE_WINDOW and "60 iterations since the rollback checkpoint 4940" in why
    window, why = spike_window(5000, 4500)  # a rollback further back than the default window
    assert window == 500 and "back to the rollback checkpoint 4500" in why
    window, why = spike_window(250, 180)  # early: the window leaves a baseline before it
    assert window == 125 and 250 - window >= 1 and "before iteration 1" in why
    window, _ = spike_window(40, 0)  # rollback to scratch: still at most step - 1
    assert 1 <= window <= 39


def test_checkpoint_discovery_reads_iter_directories_only(tmp_path) -> None:
    from dataloaders.trainers import MEGATRON_LM, get_trainer

    for name in ("iter_0000200", "iter_0000100", "latest", "iter_abc"):
        (tmp_path / name).mkdir()
    (tmp_path / "iter_0000300").write_text("a file, not a checkpoint")
    assert get_trainer(MEGATRON_LM).checkpoints(tmp_path) == [100, 200]


class _StepDashTrainer(MegatronLM):
    """A trainer that saves `step-N` folders (as torchtitan does), written the way a new
    trainer module would: its own naming, nothing changed outside it."""

    name = "step-dash-test"
    checkpoint_folder = "step-{}"
    checkpoint_pattern = re.compile(r"step-(\d+)")


def test_a_trainer_writing_step_n_folders_needs_nothing_outside_its_module(tmp_path) -> None:
    """The rollback, the config's checkpoint list, `triage --checkpoints DIR` and spike's
    suggested `--checkpoint` all ask the run's trainer: a trainer naming its checkpoints
    `step-N` is read through its own module alone (Megatron's iter_ folders beside them are
    not its checkpoints)."""
    from dataloaders.run_config import RunConfig
    from forensics.commands.triage import parse_checkpoints

    trainer = _StepDashTrainer()
    for name in ("step-100", "step-1150", "step-1200", "iter_0001100", "step-x"):
        (tmp_path / name).mkdir()
    assert trainer.checkpoints(tmp_path) == [100, 1150, 1200]
    assert parse_checkpoints(str(tmp_path), trainer) == (100, 1150, 1200)
    config = RunConfig.model_validate(
        {
            "data": {
                "format": "megatron",
                "seq_length": 8,
                "blend": [{"prefix": "p", "weight": 1}],
            },
            "training": {"global_batch_size": 1, "train_iters": 10},
            "checkpoints": [1000],
            "checkpoint_dir": str(tmp_path),
        }
    )
    listed = config.available_checkpoints(trainer)
    assert listed == [100, 1000, 1150, 1200]
    rb = recommend_rollback(1234, listed, trainer=trainer)
    assert (rb.iteration, rb.rule) == (1150, "window")
    assert "step-1150" in rb.note and "iter_" not in rb.note
    rb = recommend_rollback(1234, listed, onset=1120, trainer=trainer)
    assert (rb.iteration, rb.rule) == (1000, "evidence") and "step-1000" in rb.note
    assert (tmp_path / trainer.checkpoint_name(1150)).is_dir()


def test_spike_warnings_are_the_windows_alarms_and_stage_switches() -> None:
    """forensics spike's warnings: a grad-norm alarm in the window that announced this spike,
    a stage that began inside the window; not an alarm no loss event followed, not one before
    the window, not the run's first stage."""
    from forensics.rollback import Mark
    from forensics.spike.blame import warning_marks

    events = [
        {"kind": "grad_norm_alarm", "step": 380, "loss_onset_step": 449},
        {"kind": "grad_norm_alarm", "step": 300, "loss_onset_step": None},  # nothing followed
        {"kind": "grad_norm_alarm", "step": 100, "loss_onset_step": 120},  # before the window
        {"kind": "spike", "step": 449, "verdict": "malignant"},
    ]
    marks = warning_marks(449, (250, 449), events, [1, 340])
    assert marks == [Mark(380, "the grad-norm alarm"), Mark(340, "the data stage switch")]
    rb = recommend_rollback(449, range(0, 449, 50), onset=420, warnings=marks)
    assert (rb.iteration, rb.before) == (300, 340)
