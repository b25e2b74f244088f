"""The action a restart plan leads with (forensics.skip.action): rebuild when the culprit's share
of the rest of the run is material, skip when it is confined to the window; the first screen
words the same decision."""

from __future__ import annotations

from forensics.report.action_view import action_lines, skip_label
from forensics.skip.action import MATERIAL_AHEAD_SHARE, decide_action

AHEAD_MATERIAL = {
    "share_of_remaining_samples": 0.156,
    "iterations_holding_it": 1738,
    "iterations": 1740,
}
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
    lines = action_lines({"action": action}, 2200)
    assert lines[0] == ("ACTION", "remove and rebuild: forensics rebuild s")
    assert "checkpoint iteration 2200" in lines[2][1] and "order changes" in lines[2][1]
    assert skip_label({"action": action}) == "STOPGAP"


def test_confined_to_the_window_leads_with_skipping() -> None:
    action = decide_action(
        AHEAD_CONFINED, skip_iterations=60, blocked_documents=150, command="forensics rebuild s"
    )
    assert action["kind"] == "skip" and action["command"] is None
    assert action_lines({"action": action}, 2200)[0][0] == "ACTION"
    assert skip_label({"action": action}) == "SKIP"


def test_without_a_rebuild_for_the_family_the_user_removes_the_documents() -> None:
    action = decide_action(AHEAD_MATERIAL, skip_iterations=0, blocked_documents=9, command=None)
    assert action["kind"] == "remove" and "block list" in action["command"]
    assert action["stopgap"] is None


def test_nothing_to_do_says_nothing() -> None:
    action = decide_action({}, skip_iterations=0, blocked_documents=0, command=None)
    assert action["kind"] == "none" and action_lines({"action": action}, None) == []
    assert skip_label({}) == "SKIP"  # a skip file from before the action existed
