"""`forensics watch` agrees with `forensics triage` on every rule of the field guide: the same
events, verdicts, top causes and actions, read from a growing Megatron log a chunk at a time
(forensics_testing.loss_curves.rule_case, rendered as Megatron lines)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_watch import _table

from forensics.triage.analyze import triage
from forensics.watch.loop import Watcher, WatchOptions
from forensics_testing import loss_curves

CHUNK = 500  # lines a poll: a trainer logging every step, polled every few seconds


def _watch(lines: list[str], tmp_path: Path) -> list[dict[str, Any]]:
    log = tmp_path / "train.log"
    log.touch()
    w = Watcher(WatchOptions(log=log, out=tmp_path / "w"))
    msgs: list[dict[str, Any]] = []
    for i in range(0, len(lines), CHUNK):
        with open(log, "a") as fh:
            fh.write("\n".join(lines[i : i + CHUNK]) + "\n")
        msgs += w.poll()
    w.close()
    return msgs


def _latest(msgs: list[dict[str, Any]], ev: dict[str, Any]) -> dict[str, Any] | None:
    """The watcher's latest word on the batch event `ev` (same kind and curve, overlapping)."""
    tol = 10 if ev["kind"] == "spike" else 500
    end = ev.get("end_step") or ev.get("peak_step") or ev["step"]
    found = [
        m["event"]
        for m in msgs
        if m["message"] in ("raised", "verdict")
        and m["kind"] == ev["kind"]
        and m.get("curve") == ev.get("curve")
        and m["step"] - tol <= end
        and (m["event"].get("end_step") or m["event"].get("peak_step") or m["step"]) + tol
        >= ev["step"]
    ]
    return found[-1] if found else None


def _said(ev: dict[str, Any]) -> tuple:
    causes = ev.get("likely_causes") or [{}]
    return (ev.get("verdict"), causes[0].get("cause"), ev.get("action"), ev.get("scope"))


@pytest.mark.parametrize("name", sorted(loss_curves.RULE_CASES))
def test_watch_agrees_with_triage_on_every_rule(name: str, tmp_path: Path) -> None:
    lines = loss_curves.megatron_lines(loss_curves.rule_case(name))
    batch = triage(_table(lines))
    msgs = _watch(lines, tmp_path)
    wanted = [
        e
        for e in batch.events
        if e["kind"] not in ("grad_norm_alarm", "loss_scale_collapse")
        or e.get("mode") == "sustained"
    ]
    assert wanted, name
    for ev in wanted:
        seen = _latest(msgs, ev)
        assert seen is not None, (name, ev["kind"], ev["step"])
        assert _said(seen) == _said(ev), (name, ev["kind"], ev["step"])


def test_watched_divergence_says_stop_now_and_checks_the_cause_not_the_data(
    tmp_path: Path,
) -> None:
    """Clipping is supported: the plan says STOP NOW and the clip check; no data replay is
    started even with a config to replay from."""
    lines = loss_curves.megatron_lines(loss_curves.rule_case("clip_divergence"))
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    w = Watcher(WatchOptions(log=log, out=tmp_path / "w", config=str(tmp_path / "run.yaml")))
    msgs = w.poll()
    w.close()
    (plan,) = [m for m in msgs if m["message"] == "plan"]
    assert "STOP NOW" in plan["summary"] and "check --clip-grad" in plan["summary"]
    assert plan["action"].startswith("STOP NOW") and "roll back to 1999" in plan["summary"]
    assert not [m for m in msgs if m["message"].startswith("forensics_")]


def test_webhook_severity_of_the_new_rules() -> None:
    from forensics.watch.sinks import json_event, severity

    plan = {"message": "plan", "kind": "spike_plan", "status": "provisional"}
    assert severity(plan) == "warning"
    assert severity(plan | {"action": "STOP NOW: stop the run ..."}) == "critical"
    assert severity({"message": "raised", "kind": "slow_climb"}) == "warning"
    assert severity({"message": "raised", "kind": "recurring_spikes"}) == "warning"
    lifted = json_event(
        {"message": "raised", "kind": "divergence", "event": {"action": "STOP"}}, "x"
    )
    assert lifted["action"] == "STOP"


def test_the_background_spike_of_one_domain_goes_to_that_domains_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spike on code's curve alone is analysed into spike-S-code/, the folder triage's
    suggested command names, and the started message says where (a restarted watcher reads it
    back from there)."""
    import forensics.watch.planning as planning
    from forensics.triage.config import RunInfo
    from forensics.watch.spikejob import SpikeJob

    started: list[Path] = []

    def fake_start(source, step, window, watch_dir, *, extra=(), force=False, folder=None):  # noqa: ANN001
        out = watch_dir / (folder or f"spike-{step}")
        started.append(out)
        return SpikeJob(step, out, watch_dir / f"{out.name}.log", None, pid=0)

    monkeypatch.setattr(planning, "start_spike", fake_start)
    config = tmp_path / "run.yaml"
    config.write_text("not read: the spike is not started for real\n")
    log = tmp_path / "train.log"
    lines = loss_curves.megatron_lines(loss_curves.rule_case("domain_alone"))
    log.write_text("\n".join(lines) + "\n")
    run = RunInfo(config_path=str(config))
    watcher = Watcher(WatchOptions(log=log, out=tmp_path / "w", config=str(config), run=run))
    msgs = watcher.poll()
    watcher.close()
    began = [m for m in msgs if m["message"] == "forensics_started"]
    assert began, [m["summary"] for m in msgs]
    assert [p.name for p in started] == [f"spike-{m['step']}-code" for m in began]
    assert [Path(m["out"]) for m in began] == started
