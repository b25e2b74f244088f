"""The rollback rule: latest checkpoint in [S-100, S-50], else older, else S-100 with a note."""

from __future__ import annotations

import pytest

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


def test_onset_before_checkpoint_names_an_earlier_clean_one() -> None:
    rb = recommend_rollback(1234, [900, 1000, 1150], onset=1100)
    assert rb.iteration == 1150 and rb.earlier == 1000
    assert "iter_0001000" in rb.note
    clean = recommend_rollback(1234, [900, 1000, 1150], onset=1190)
    assert clean.earlier is None and "onset" not in clean.note


def test_triage_and_spike_agree_on_the_window() -> None:
    """triage's `next_command`, the watcher and spike's default use one rule (spike_window)."""
    from forensics.rollback import SPIKE_WINDOW, spike_window
    from forensics.spike import SpikeOptions

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
    from dataloaders.checkpoints import checkpoint_iterations

    for name in ("iter_0000200", "iter_0000100", "latest", "iter_abc"):
        (tmp_path / name).mkdir()
    (tmp_path / "iter_0000300").write_text("a file, not a checkpoint")
    assert checkpoint_iterations(tmp_path) == [100, 200]
