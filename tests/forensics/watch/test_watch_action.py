"""The message a finished `forensics spike` run sends from `forensics watch` names what to do:
the ACTION skip.json decided (remove and rebuild, or skip), the rollback iteration and the flags
file to restart with, as the report's first screen says it. On the small spike run
(forensics_testing/small_run.py), through the webhook (a local receiver) and the terminal.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console
from test_watch import CFG

from forensics.watch.book import EventBook
from forensics.watch.loop import Watcher, WatchOptions
from forensics.watch.terminal import message_text
from forensics_testing.webhook_receiver import Receiver, serve_webhook


@pytest.fixture
def webhook():
    with serve_webhook() as url:
        yield url


@pytest.mark.parametrize("kind", ["rebuild", "skip"])
def test_finished_spike_message_names_the_action(
    small_run: Path, tmp_path: Path, webhook: str, kind: str
) -> None:
    """The message a finished spike run sends (here one a previous watcher started: the new
    watcher finds its outputs and reports them) names the action skip.json decided, the rollback
    iteration and the flags file to restart with, on the webhook and on the terminal, whole."""
    out = tmp_path / "w"
    spike = out / "spike-170"
    shutil.copytree(small_run / "spike", spike)
    plan = json.loads((spike / "skip.json").read_text())
    assert plan["action"]["kind"] == "rebuild"  # the small run's culprit keeps coming
    if kind == "skip":  # as decide_action writes a culprit confined to the window
        plan["action"] = {"kind": "skip", "command": None, "stopgap": None, "why": "confined"}
        (spike / "skip.json").write_text(json.dumps(plan))
    EventBook(out).append({"message": "forensics_started", "kind": "spike_forensics",
                           "step": 170, "window": 40})  # fmt: skip
    log = tmp_path / "train.log"
    log.touch()
    w = Watcher(WatchOptions(log=log, out=out, cfg=CFG, webhook=webhook, webhook_backoff_s=0.01))
    w.close()
    (sent,) = [b for b in Receiver.bodies if b["message"] == "forensics"]
    rollback = json.loads((spike / "report.json").read_text())["rollback_iteration"]
    flags = spike / "restart-megatron-lm.flags"
    assert (sent["action"], sent["rollback_iteration"], sent["flags_file"]) == (
        kind,
        rollback,
        str(flags),
    )
    assert sent["paste"] == flags.read_text().strip()
    restart = f"restart from checkpoint iteration {rollback} with $(cat {flags})"
    text = sent["summary"]
    assert text.startswith("forensics spike for step 170: culprit crawl_batch=crawl-2026-w17 (s")
    if kind == "rebuild":
        rebuilt = f"{plan['action']['rebuild_out']}/restart-rebuilt.flags"
        assert f"ACTION remove and rebuild: {plan['action']['command']}, then " in text
        assert f"restart from checkpoint iteration {rollback} with $(cat {rebuilt})" in text
        assert f"; stopgap: {restart}" in text and sent["rebuild_flags_file"] == rebuilt
    else:
        assert f"ACTION skip: {restart};" in text and "rebuild" not in text
    assert "spike found" not in text
    console = Console(record=True, width=100, color_system=None)
    console.print(message_text(sent), soft_wrap=True)
    assert console.export_text().strip() == f"#{sent['seq']} {text}"  # whole, never cut
