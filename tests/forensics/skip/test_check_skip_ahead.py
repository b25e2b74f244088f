"""check-skip on a plan that leads with removing the culprit repeats why, and the command: a skip
file that fits the run is still only the stopgap."""

from __future__ import annotations

import json
from pathlib import Path

from forensics.commands.check_skip import ahead_line
from forensics.skip.action import decide_action
from forensics_testing.small_run import cli

AHEAD = {"share_of_remaining_samples": 0.156, "iterations_holding_it": 1738, "iterations": 1740}


def test_ahead_line_only_when_the_plan_leads_with_removing_the_culprit() -> None:
    rebuild = decide_action(
        AHEAD, skip_iterations=60, blocked_documents=150, command="forensics rebuild spike-2260"
    )
    assert ahead_line(rebuild) == (
        "it is 15.6% of the samples of the rest of the run (in 1,738 of 1,740 iterations), at "
        "least 1%: skipping iterations cannot avoid it, so remove its documents and restart on "
        "the rebuilt data; the skip flags are a stopgap for a restart that cannot wait. "
        "First: forensics rebuild spike-2260"
    )
    remove = decide_action(AHEAD, skip_iterations=60, blocked_documents=150, command=None)
    assert ahead_line(remove).endswith(
        "First: remove the block list's documents (skip.json: documents) from the data"
    )
    confined = {"share_of_remaining_samples": 0.001, "iterations": 1740}
    skip = decide_action(confined, skip_iterations=60, blocked_documents=150, command="x")
    assert skip["kind"] == "skip" and ahead_line(skip) is None


def test_check_skip_prints_ahead_for_the_small_runs_rebuild(small_run: Path) -> None:
    action = json.loads((small_run / "spike" / "skip.json").read_text())["action"]
    assert action["kind"] == "rebuild"  # the small run's dirty stage keeps coming
    proc = cli("check-skip", "spike/skip.json", "--config", "forensics.yaml", cwd=small_run)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("ok: spike/skip.json fits")
    ahead = [line for line in lines if line.startswith("AHEAD: ")]
    assert ahead == [f"AHEAD: {action['why']}. First: {action['command']}"]
