"""The action a restart plan leads with (forensics.skip.action): rebuild when the culprit's share
of the rest of the run is material, skip when it is confined to the window; the first screen
words the same decision."""

from __future__ import annotations

from forensics.report.first_screen import action_text, commands, stopgap
from forensics.report.skip_view import ReportSkip
from forensics.skip.action import MATERIAL_AHEAD_SHARE, decide_action

AHEAD_MATERIAL = {
    "share_of_remaining_samples": 0.156,
    "iterations_holding_it": 1738,
    "iterations": 1740,
}


def _plan(action: dict) -> ReportSkip:
    """A skip plan as the report reads it, with `action` and one skipped range."""
    flag = {"flag": "--iterations-to-skip 2201", "pin": "--ckpt-step 2200", "semantics": "k",
            "consequence": "lags"}  # fmt: skip
    return ReportSkip.from_dict(
        {
            "iterations": [[2201, 2201]],
            "trainer": "megatron-lm",
            "flags": {"megatron-lm": flag},
            "action": action,
        }  # fmt: skip
    )


AHEAD_CONFINED = {
    "share_of_remaining_samples": 0.0004,
    "iterations_holding_it": 3,
    "iterations": 1740,
}


def test_material_share_ahead_leads_with_rebuild_and_skipping_is_the_stopgap() -> None:
    action = decide_action(
        AHEAD_MATERIAL, skip_iterations=60, blocked_documents=150, command="forensics rebuild s"
    )
    assert action["kind"] == "rebuild" and action["command"] == "forensics rebuild s"
    assert action["stopgap"] and action["material_share"] == MATERIAL_AHEAD_SHARE
    plan = _plan(action)
    assert action_text(plan) == "remove and rebuild: forensics rebuild s"
    first, restart = commands(plan, 2200)
    assert first.text == "forensics rebuild s" and "checkpoint iteration 2200" in restart.note
    assert restart.text == "$(cat rebuild-STEP/restart-rebuilt.flags)"
    lines, paste = stopgap(plan, 2200)
    assert lines[0][0] == "STOPGAP" and paste.text == "--ckpt-step 2200 --iterations-to-skip 2201"


def test_confined_to_the_window_leads_with_skipping() -> None:
    action = decide_action(
        AHEAD_CONFINED, skip_iterations=60, blocked_documents=150, command="forensics rebuild s"
    )
    assert action["kind"] == "skip" and action["command"] is None
    plan = _plan(action)
    assert action_text(plan).startswith("skip iterations 2201")
    (restart,) = commands(plan, 2200)
    assert restart.text == "--ckpt-step 2200 --iterations-to-skip 2201"
    assert stopgap(plan, 2200) == ([], None)


def test_without_a_rebuild_for_the_family_the_user_removes_the_documents() -> None:
    action = decide_action(AHEAD_MATERIAL, skip_iterations=0, blocked_documents=9, command=None)
    assert action["kind"] == "remove" and "block list" in action["command"]
    assert action["stopgap"] is None


def test_nothing_to_do_says_nothing() -> None:
    action = decide_action({}, skip_iterations=0, blocked_documents=0, command=None)
    assert action["kind"] == "none"
    nothing = ReportSkip.from_dict({"iterations": [], "trainer": "megatron-lm", "flags": {},
                                    "action": action})  # fmt: skip
    assert action_text(nothing) == "" and commands(nothing, None) == []
