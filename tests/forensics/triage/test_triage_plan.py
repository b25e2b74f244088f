"""The plan at once: every spike that has not come back carries the rollback point and the
`forensics spike` command, its causes ranked from the evidence, and what will decide it; a
recovered spike is never malignant (real BLOOM snippets, generated curves)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from forensics.cli import app
from forensics.triage.analyze import triage
from forensics.triage.config import RunInfo
from forensics.triage.readers import read_log
from forensics_testing import loss_curves
from forensics_testing.demo.build import DemoSpec, megatron_log_lines
from forensics_testing.repo_paths import SHARED

CURVES = SHARED / "curves"
needs_shared = pytest.mark.skipif(not CURVES.is_dir(), reason="../shared/curves not present")
S = loss_curves.SPIKE_STEP


def _spikes(result) -> list[dict]:
    return [e for e in result.events if e["kind"] == "spike"]


def _demo_log(tmp_path: Path, tail: int) -> Path:
    """The demo's simulated log (mixture switch at 2201, malignant spike at 2260) cut `tail`
    iterations after the spike: the run is still training."""
    log = tmp_path / "train.log"
    log.write_text("\n".join(megatron_log_lines(replace(DemoSpec(), log_tail=tail))) + "\n")
    return log


def test_log_ending_40_steps_after_the_spike_has_the_plan_in_events_json(tmp_path: Path) -> None:
    """The 3 a.m. case: 40 steps after a spike that will not come back, with --config showing
    a data stage that began 59 iterations before it. The verdict is honestly undecided, but the
    rollback point, the spike command and the data as first cause are there already."""
    log = _demo_log(tmp_path, 40)
    out = tmp_path / "tri"
    res = CliRunner().invoke(
        app,
        ["triage", str(log), "--out", str(out), "--config", "configs/demo.yaml",
         "--checkpoints", ",".join(str(c) for c in range(100, 2300, 100))],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    events = json.loads((out / "events.json").read_text())
    (spike,) = [e for e in events if e["kind"] == "spike"]
    assert spike["verdict"] == "undecided" and spike["step"] == 2260
    # The stage switch at 2201 is the evidence: the latest checkpoint before it.
    assert spike["rollback_iteration"] == 2200 and spike["rollback_rule"] == "evidence"
    assert spike["evidence"]["rollback"].startswith(
        "rule: the latest checkpoint before the data stage that brought new data (iteration 2201)"
    )
    assert spike["next_command"] == (
        "forensics spike --config configs/demo.yaml --step 2260 --window 300 --out spike-2260/"
    )
    first = spike["likely_causes"][0]
    assert first["supported"] is True and first["cause"].startswith("the data")
    assert "data stage began at iteration 2201, 59 steps before the onset" in first["evidence"]
    decide = spike["decide"]
    assert decide["verdict_by_step"] == 2760 and decide["rule"].startswith("decide by step 2760")
    # The divergence triage sees in the same rise names the data first too, with its own plan.
    (div,) = [e for e in events if e["kind"] == "divergence"]
    assert div["likely_causes"][0]["cause"].startswith("the data")
    assert div["rollback_iteration"] == 2200 and div["next_command"].startswith("forensics spike")
    md = (out / "report.md").read_text()
    assert "roll back to iteration 2200" in md and "forensics spike --config" in md
    assert "decide by step 2760" in md


def test_without_a_config_the_data_cause_says_what_it_needs() -> None:
    df = loss_curves.make("malignant_step").filter(pl.col("step") <= S + 40)
    (spike,) = _spikes(triage(df))
    assert spike["verdict"] == "undecided" and spike["rollback_rule"] == "no-checkpoint"
    assert spike["rollback_iteration"] == S - 100  # the fallback's target: nothing known
    assert "fixed fallback" in spike["evidence"]["rollback"]
    data = next(c for c in spike["likely_causes"] if c["cause"].startswith("the data"))
    assert data["supported"] is None and "--config" in data["evidence"]
    # A stage switch long before the spike (outside the replayed window) is not evidence.
    run = RunInfo(stage_starts=(1, S - 1000), config_path="run.yaml", config_read=True)
    (spike,) = _spikes(triage(df, info=run))
    data = next(c for c in spike["likely_causes"] if c["cause"].startswith("the data"))
    assert data["supported"] is None and "no data stage began in the 300" in data["evidence"]


def test_a_stage_switch_is_evidence_for_the_rollback() -> None:
    """Checkpoints every 50, new data from S-30: the latest checkpoint before it (S-50), where
    the fixed window would pick S-100's neighbour... and with it S-50 either way; from S-80 the
    evidence keeps S-100 (not S-50, which already trained on the new data)."""
    df = loss_curves.make("malignant_step").filter(pl.col("step") <= S + 40)
    ckpts = tuple(range(0, S, 50))
    for stage, expected in ((S - 30, S - 50), (S - 80, S - 100), (S - 49, S - 50)):
        run = RunInfo(checkpoints=ckpts, stage_starts=(1, stage), config_read=True)
        (spike,) = _spikes(triage(df, info=run))
        assert (spike["rollback_iteration"], spike["rollback_rule"]) == (expected, "evidence")
    run = RunInfo(checkpoints=(*ckpts, S - 20), stage_starts=(1, S - 15), config_read=True)
    (spike,) = _spikes(triage(df, info=run))
    assert spike["rollback_iteration"] == S - 20  # closer than the fixed window, still clean


def test_undecided_is_timed_by_this_runs_own_recoveries() -> None:
    """Two benign spikes recovered within ~60 steps; a third not back yet is given the step by
    which it must be back to be like them, and the window's end for the verdict."""
    df = loss_curves.healthy(4000, seed=3)
    s, loss = df["step"].to_numpy(), df["loss"].to_numpy().copy()
    for at in (1500, 2200):
        t = (s - at).astype(float)
        loss += np.where(s >= at, 1.0 * np.clip(1 - t / 60.0, 0, 1) ** 1.5, 0.0)
    loss += np.where(s >= S, 0.9, 0.0)
    df = df.with_columns(pl.Series("loss", loss)).filter(pl.col("step") <= S + 30)
    spikes = _spikes(triage(df))
    assert [e["verdict"] for e in spikes] == ["benign", "benign", "undecided"]
    slowest = max(e["recovery_steps"] for e in spikes[:2])
    decide = spikes[2]["decide"]
    assert decide["back_by_step"] == spikes[2]["peak_step"] + slowest
    assert decide["verdict_by_step"] == spikes[2]["peak_step"] + 500
    assert f"within {slowest} steps" in decide["rule"] and "2 earlier benign" in decide["rule"]
    assert "rollback_iteration" not in spikes[0]  # it came back: nothing to roll back


@pytest.mark.parametrize("seed", range(4))
def test_slow_benign_spikes_are_never_malignant_at_any_cut(seed: int) -> None:
    """A spike that climbs back over ~350 steps, read at every cut of the log as a watcher
    would: undecided (with the plan) until it is back, then benign; never malignant."""
    full = loss_curves.make("slow_benign", seed=seed)
    for cut in range(S + 20, S + 700, 60):
        spikes = _spikes(triage(full.filter(pl.col("step") <= cut)))
        assert spikes and all(e["verdict"] != "malignant" for e in spikes), cut
        for e in spikes:
            if e["verdict"] == "undecided":
                assert "rollback_iteration" in e and e["next_command"]
    (spike,) = _spikes(triage(full))
    assert spike["verdict"] == "benign"


@needs_shared
def test_recovered_bloom_spikes_are_never_malignant() -> None:
    """Every real curve: a spike whose loss came back within its tolerance is benign."""
    paths = sorted(CURVES.glob("bloom*_snippet.csv")) + [
        p for p in sorted(CURVES.glob("modded_nanogpt_*.csv")) if not p.name.endswith("_val.csv")
    ]
    for path in paths:
        result = triage(read_log(path))
        for e in _spikes(result):
            if e["evidence"]["recovered_step"] is not None:
                assert e["verdict"] == "benign", (path.name, e["step"])
            if e["verdict"] != "benign":
                assert e["rollback_iteration"] < e["step"] and e["next_command"], path.name
    # BLOOM tr1-13B: a benign spike that took ~500 steps; its snippet ends 40 steps after.
    result = triage(read_log(CURVES / "bloom_tr1_13B_spike_29050_snippet.csv"))
    (spike,) = _spikes(result)
    assert spike["verdict"] == "undecided" and spike["rollback_iteration"] <= 29050 - 50
    assert spike["next_command"].startswith("forensics spike --config <run-config.yaml>")


def test_triage_warns_when_the_spike_is_past_the_configs_run() -> None:
    """A log whose spike lies past the config's train_iters is not that config's run: the
    suggested spike command says so instead of pointing at a window spike would refuse."""
    from forensics.triage.config import RunInfo
    from forensics.triage.plan import next_command

    run = RunInfo(config_path="forensics.yaml", train_iters=2000, config_read=True)
    _, why = next_command(3000, 2940, run)
    assert why is not None and "past the config's train_iters 2000" in why
    _, why = next_command(1500, 1440, run)
    assert why is None or "train_iters" not in why
