"""The watcher prepares while the run trains: on a spike it posts a provisional plan at once
(rollback point, spike command, the step that decides it), then confirms it when the spike
turns malignant or clears it when the loss comes back. Followed live from the fake trainer."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_watch import CFG, _deciding_step, _follow, _table

from forensics.triage.analyze import triage
from forensics.watch.loop import Watcher, WatchOptions
from forensics.watch.plans import PlanState, next_status, plan_message
from forensics_testing.watch_trainer import scenario


def _plans(msgs: list[dict]) -> list[dict]:
    return [m for m in msgs if m["message"] == "plan"]


def test_malignant_spike_gets_a_provisional_plan_then_confirmed(tmp_path: Path) -> None:
    w, msgs, _ = _follow("malignant", tmp_path)
    spikes = [m for m in msgs if m["kind"] == "spike"]
    assert [(m["message"], m["verdict"]) for m in spikes] == [
        ("raised", "undecided"),
        ("verdict", "malignant"),
    ]
    provisional, confirmed = _plans(msgs)
    raised = spikes[0]
    # Posted with the spike, in the same poll, long before the verdict.
    assert provisional["status"] == "provisional" and provisional["poll"] == raised["poll"]
    assert provisional["seq"] == raised["seq"] + 1 and provisional["step"] == raised["step"]
    assert provisional["rollback_iteration"] == raised["event"]["rollback_iteration"]
    assert provisional["decide_by_step"] == raised["event"]["decide"]["back_by_step"]
    assert provisional["summary"].startswith(
        f"provisional plan for the spike at step {raised['step']}"
    )
    assert f"roll back to {provisional['rollback_iteration']}" in provisional["summary"]
    assert f"decide by step {provisional['decide_by_step']}" in provisional["summary"]
    assert "next: forensics spike --config <run-config.yaml>" in provisional["summary"]
    assert confirmed["status"] == "confirmed" and confirmed["seq"] == spikes[1]["seq"] + 1
    assert confirmed["summary"].startswith("plan confirmed (malignant) for the spike at step")


def test_benign_spike_plan_is_cleared(tmp_path: Path) -> None:
    """The log handed over in two parts, no timing involved: first up to the line at which the
    batch triage calls the spike undecided (the watcher must raise it and post a provisional
    plan), then the rest, where the loss comes back (the plan must be cleared)."""
    lines = scenario("benign")
    table = _table(lines)
    spike = next(e for e in triage(table, CFG).events if e["kind"] == "spike")
    assert spike["verdict"] == "benign"
    undecided_at = _deciding_step(table, {**spike, "verdict": "undecided", "summary": ""})
    cut = next(i for i, ln in enumerate(lines) if f" {undecided_at}/" in ln) + 1
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines[:cut]) + "\n")
    watcher = Watcher(WatchOptions(log=log, out=tmp_path / "w", cfg=CFG))
    first = watcher.poll()
    with log.open("a") as fh:
        fh.write("\n".join(lines[cut:]) + "\n")
    second = watcher.poll()
    watcher.close()
    assert [(m["message"], m["verdict"]) for m in first if m["kind"] == "spike"] == [
        ("raised", "undecided")
    ]
    assert [p["status"] for p in _plans(first)] == ["provisional"]
    assert [(m["message"], m["verdict"]) for m in second if m["kind"] == "spike"] == [
        ("verdict", "benign")
    ]
    cleared = _plans(second)
    assert [p["status"] for p in cleared] == ["cleared"]
    assert "came back" in cleared[0]["summary"] and "no rollback" in cleared[0]["summary"]
    assert all(m.get("verdict") != "malignant" for m in first + second)


def test_plan_statuses_move_forward_only() -> None:
    """While the analysis runs nothing is posted but a clearing; a confirmed plan is never
    provisional again; a spike nobody planned for is not cleared."""
    st = PlanState(event={"kind": "spike", "rollback_iteration": 90}, verdict="undecided")
    assert next_status(st, analysing=True) is None
    assert next_status(st, analysing=False) == "provisional"
    st.posted, st.verdict = "provisional", "malignant"
    assert next_status(st, analysing=True) is None and next_status(st, False) == "confirmed"
    st.posted, st.verdict = "confirmed", "undecided"
    assert next_status(st, analysing=False) is None
    assert next_status(PlanState(verdict="benign"), analysing=False) is None
    started = PlanState(event={"kind": "spike"}, verdict="benign", started=True)
    assert next_status(started, analysing=True) == "cleared"
    # The analysis's culprit, rollback and action replace triage's provisional ones.
    st = PlanState(
        event={"kind": "spike", "rollback_iteration": 90, "decide": {"back_by_step": 400}},
        result={"ok": True, "culprit": "source:crawl_batch=b7", "culprit_cluster":
                "crawl_batch=b7", "rollback_iteration": 100, "action_text": "ACTION skip: x"},
    )  # fmt: skip
    msg = plan_message(120, st, "provisional")
    assert msg["summary"] == (
        "provisional plan for the spike at step 120; provisional culprit crawl_batch=b7; roll "
        "back to 100; decide by step 400; ACTION skip: x"
    )


def test_wait_ends_when_an_analysis_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between polls the watcher waits the interval, but not past the end of a background
    analysis: the plan is posted one poll after the spike plus the analysis, no later. The
    watcher's clock is a fake one that only its own sleeps advance, so the sleeps and polls are
    counted, not timed."""
    from forensics.watch import loop
    from forensics.watch.loop import Watcher, WatchOptions

    class Clock:
        """time as loop.py uses it: sleep() moves monotonic() and time() on, and is recorded."""

        def __init__(self) -> None:
            self.now = 1000.0
            self.sleeps: list[float] = []

        def monotonic(self) -> float:
            return self.now

        def time(self) -> float:
            return self.now

        def sleep(self, seconds: float) -> None:
            self.sleeps.append(seconds)
            self.now += seconds

    class Job:
        def __init__(self, done_at: float) -> None:
            self.done_at = done_at
            self.polls = 0

        def returncode(self) -> tuple[bool, int | None]:
            self.polls += 1
            return clock.now >= self.done_at, 0

    log = tmp_path / "train.log"
    log.touch()
    w = Watcher(WatchOptions(log=log, out=tmp_path / "w", interval=5.0))
    clock = Clock()
    monkeypatch.setattr(loop, "time", clock)
    try:
        w.wait(0.3)  # nothing running: the whole interval, in steps of at most 0.2 s
        assert sum(clock.sleeps) == pytest.approx(0.3) and max(clock.sleeps) <= 0.2
        clock.sleeps.clear()
        job = Job(clock.now + 0.4)
        w.jobs[100] = job  # type: ignore[assignment]
        w.wait(5.0)  # the job ends 0.4 s in: the wait ends at the first poll after that
        assert job.done_at <= clock.now < job.done_at + 0.2
        assert job.polls == len(clock.sleeps) + 1 and max(clock.sleeps) <= 0.2
        clock.sleeps.clear()
        w.wait(5.0)  # already finished: no sleep at all
        assert clock.sleeps == []
    finally:
        w.jobs.clear()
        w.close()
