"""Detection on real curves (../shared/curves) and on generated curves with a known answer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from forensics.rollback import recommend_rollback
from forensics.triage.analyze import triage
from forensics.triage.config import RunInfo
from forensics.triage.readers import read_log
from forensics_testing import loss_curves
from forensics_testing.repo_paths import REPO_ROOT

CURVES = REPO_ROOT.parent / "shared" / "curves"
needs_shared = pytest.mark.skipif(not CURVES.is_dir(), reason="../shared/curves not present")


def _curves(pattern: str) -> list[Path]:
    return sorted(p for p in CURVES.glob(pattern) if not p.name.endswith("_val.csv"))


def _kinds(result, kind: str) -> list[dict]:
    return [e for e in result.events if e["kind"] == kind]


@needs_shared
@pytest.mark.filterwarnings("ignore")
def test_megatron_ci_release_runs_are_clean() -> None:
    files = [p for p in _curves("mlm_*.csv") if "_sm" not in p.name]
    assert len(files) >= 15
    for f in files:
        r = triage(read_log(f))
        bad = [e for e in r.events if e["kind"] == "divergence" or e.get("verdict") == "malignant"]
        assert not bad, f"{f.name}: {bad}"


@needs_shared
def test_modded_nanogpt_one_step_spikes_are_benign_or_counted() -> None:
    total_blips = 0
    for f in _curves("modded_nanogpt_*.csv"):
        r = triage(read_log(f))
        verdicts = {e["verdict"] for e in _kinds(r, "spike")}
        assert verdicts <= {"benign"}, f"{f.name}: {verdicts}"
        assert not _kinds(r, "divergence")
        total_blips += r.summary["curves"]["loss"]["blips"]
    assert total_blips > 100  # per-step microbatch noise: many blips, all merely counted


@needs_shared
@pytest.mark.parametrize(
    "source",
    ["bloom176b_spike_31216_snippet.csv", "megatron_logs/train_tr11-176B-ml_chronicles.log"],
)
@pytest.mark.filterwarnings("ignore")
def test_bloom176b_spike_is_benign_and_grad_norm_led(source: str) -> None:
    r = triage(read_log(CURVES / source))
    spikes = [e for e in _kinds(r, "spike") if 31210 <= e["step"] <= 31222]
    assert len(spikes) == 1 and spikes[0]["verdict"] == "benign"
    assert spikes[0]["peak_step"] == 31219
    alarms = _kinds(r, "grad_norm_alarm")
    assert alarms and alarms[0]["step"] < 31219 and alarms[0]["led_loss_peak_by"] > 0


@needs_shared
@pytest.mark.parametrize(
    "source",
    [
        "bloom_tr8_104B_wide_spike_8740_snippet.csv",
        "megatron_logs/train_tr8-104B-wide_chronicles.log",
    ],
)
@pytest.mark.filterwarnings("ignore")
def test_bloom104b_ending_in_nan_is_divergence_or_malignant(source: str) -> None:
    r = triage(read_log(CURVES / source))
    assert r.summary["status"] == "act"
    late = [e for e in r.events if e["step"] >= 8700]
    assert any(e["kind"] == "divergence" or e.get("verdict") == "malignant" for e in late)
    malignant = [e for e in late if e.get("verdict") == "malignant"]
    for e in malignant:
        assert e["step"] - 100 <= e["rollback_iteration"] < e["step"]
        assert e["next_command"].startswith(
            f"forensics spike --config <run-config.yaml> --step {e['step']}"
        )


@needs_shared
def test_bloom_13b_spike_is_undecided_while_window_open_and_scale_collapse_flagged() -> None:
    r = triage(read_log(CURVES / "bloom_tr1_13B_spike_29050_snippet.csv"))
    (spike,) = _kinds(r, "spike")
    assert spike["step"] == 29050 and spike["verdict"] == "undecided"
    assert "29550" in spike["evidence"]["summary"] or "29560" in spike["evidence"]["summary"]
    (collapse,) = _kinds(r, "loss_scale_collapse")
    assert collapse["step"] == 29050
    # fp16 prints grad norm 0.000: that is "not logged", never a baseline
    assert not _kinds(r, "grad_norm_alarm")


def test_healthy_curve_has_no_events_and_a_power_law() -> None:
    r = triage(loss_curves.make("healthy"))
    assert r.events == [] and r.summary["status"] == "healthy"
    fit = r.summary["curves"]["loss"]["power_law"]
    assert fit["exponent"] < 0 and fit["r2"] > 0.9 and fit["noise_narrows"] is True


def test_benign_spike_fast_recovery_and_grad_norm_lead() -> None:
    r = triage(loss_curves.make("benign_spike"))
    (spike,) = _kinds(r, "spike")
    assert spike["verdict"] == "benign" and spike["step"] == loss_curves.SPIKE_STEP
    assert spike["recovery_speed"] == "fast" and spike["recovery_steps"] <= 50
    (alarm,) = _kinds(r, "grad_norm_alarm")
    assert alarm["led_loss_peak_by"] == 3
    assert "rollback_iteration" not in spike


def test_malignant_step_gets_rollback_and_next_command() -> None:
    run = RunInfo(checkpoints=(2500, 2920, 2940, 2990), config_path="run.yaml")
    r = triage(loss_curves.make("malignant_step"), info=run)
    (spike,) = _kinds(r, "spike")
    assert spike["verdict"] == "malignant"
    assert spike["rollback_iteration"] == 2940  # latest checkpoint in [S-100, S-50]
    assert spike["next_command"] == (
        "forensics spike --config run.yaml --step 3000 --window 300 --out spike-3000/"
    )
    assert 0.3 < spike["evidence"]["recovered_fraction"] < 0.7
    assert not _kinds(r, "plateau") and not _kinds(r, "divergence")
    # A config path the shell would split or expand is quoted, so the line pastes as it reads.
    odd = RunInfo(checkpoints=(2940,), config_path="my runs/$(rm -rf x).yaml")
    (spike,) = _kinds(triage(loss_curves.make("malignant_step"), info=odd), "spike")
    assert "--config 'my runs/$(rm -rf x).yaml' --step 3000" in spike["next_command"]


def test_malignant_step_is_undecided_before_the_window_elapses() -> None:
    df = loss_curves.make("malignant_step").filter(pl.col("step") <= loss_curves.SPIKE_STEP + 300)
    (spike,) = _kinds(triage(df), "spike")
    assert spike["verdict"] == "undecided"


def test_slow_benign_recovery_is_not_malignant() -> None:
    (spike,) = _kinds(triage(loss_curves.make("slow_benign")), "spike")
    assert spike["verdict"] == "benign" and spike["recovery_speed"] == "slow"
    assert 200 <= spike["recovery_steps"] <= 500
    assert "second-moment" in spike["evidence"]["recovery_meaning"]


def test_divergence_with_grad_norm_precursor() -> None:
    r = triage(loss_curves.make("divergence"))
    (div,) = _kinds(r, "divergence")
    alarm = _kinds(r, "grad_norm_alarm")[0]
    assert alarm["step"] < div["step"] and alarm["led_loss_onset_by"] > 0
    # Ranked from the evidence: supported, then cannot tell (the data comes first of those
    # without a config), then ruled out; within each, the order to check them.
    causes = [(c["cause"], c["supported"]) for c in div["likely_causes"]]
    assert causes == [
        ("gradient clipping misconfigured", True),
        ("the data (a bad batch, or new data in the blend)", None),
        ("fp16 loss scale collapsed", None),
        ("a faulty device", None),
        ("learning rate too high or no warmup", False),
    ]
    # Nothing says where it entered: the fallback's target, 100 before (the alarm is later).
    assert div["rollback_iteration"] == div["step"] - 100 < alarm["step"]
    # Clipping is supported: the next command is its check, not the data replay.
    assert div["next_command"].startswith("check --clip-grad") and not div["replay_suggested"]
    assert div["spike_command"].startswith(
        f"forensics spike --config <run-config.yaml> --step {div['step']}"
    )
    assert "grad-norm alarm fired" in div["evidence"]["grad_norm_before"]
    assert r.summary["status"] == "act"


@pytest.mark.parametrize(
    ("shape", "run", "conclusion"),
    [
        ("plateau_lr_floor", RunInfo(), "by design"),
        ("plateau_repeated_data", RunInfo(corpus_tokens=1e9), "repeated data"),
        (
            "plateau_capacity",
            RunInfo(params=3e10, corpus_tokens=1e13, seq_length=2048),
            "capacity reached",
        ),
        ("plateau_capacity", RunInfo(), "unexplained"),
    ],
)
def test_plateau_causes_in_order(shape: str, run: RunInfo, conclusion: str) -> None:
    r = triage(loss_curves.make(shape), info=run)
    (p,) = _kinds(r, "plateau")
    assert abs(p["step"] - loss_curves.SPIKE_STEP) < 500 and p["conclusion"].startswith(conclusion)
    assert [c["check"] for c in p["checks"]] == [
        "learning rate",
        "data repetition",
        "model capacity",
    ]
    if not run.params:
        assert "--params" in p["checks"][2]["needed"]


def test_sparse_log_interval_still_judged() -> None:
    df = loss_curves.make("malignant_step").filter(pl.col("step") % 10 == 0)
    (spike,) = _kinds(triage(df), "spike")
    assert spike["verdict"] == "malignant" and spike["step"] == loss_curves.SPIKE_STEP


def test_one_step_blips_are_counted_not_events() -> None:
    df = loss_curves.healthy(4000, seed=3)
    idx = np.arange(600, 3900, 130)[:25]  # isolated: a pair within 3 rows is a 2-row spike
    loss = df["loss"].to_numpy().copy()
    loss[idx] += 0.8
    r = triage(df.with_columns(pl.Series("loss", loss)))
    assert r.events == []
    assert r.summary["curves"]["loss"]["blips"] == 25


def test_per_domain_curve_spike_is_attributed() -> None:
    df = loss_curves.healthy(4000)
    web = df["loss"].to_numpy() + 0.3
    web[3000:] += 0.7
    r = triage(df.with_columns(pl.Series("loss:web", web)))
    (spike,) = _kinds(r, "spike")
    assert spike["curve"] == "loss:web" and spike["verdict"] == "malignant"


@pytest.mark.parametrize(
    ("ckpts", "expected"),
    [((900, 940, 960), 940), ((500, 700, 960), 700), ((), 900), ((980,), 900)],
)
def test_rollback_rule(ckpts: tuple[int, ...], expected: int) -> None:
    assert recommend_rollback(1000, ckpts).iteration == expected


@needs_shared
def test_short_megatron_run_climbing_to_the_end_is_a_divergence() -> None:
    # A perf-test run whose loss climbs from ~11.6 back to ~20 over its last 30 iterations.
    log = CURVES / "megatron_logs" / "experiments_gpt2-meg-ds-3d_meg_ds_3d_gpt2_perf_n16-ds-off.log"
    r = triage(read_log(log))
    (div,) = _kinds(r, "divergence")
    assert 30 <= div["step"] <= 45 and div["end_step"] == 62
    assert div["likely_causes"][0]["supported"] is True  # diverging at peak lr, after warmup
    assert "grad norm went from" in div["evidence"]["grad_norm_before"]


def test_sparse_domain_loss_gaps_are_not_nan() -> None:
    # A per-domain loss logged every 50th step: its gaps are not a loss going nan.
    df = loss_curves.healthy(4000)
    web = df["loss"].to_numpy() + 0.3
    web[3000:] += 0.7
    keep = df["step"].to_numpy() % 50 == 0
    col = pl.Series("loss:web", np.where(keep, web, np.nan)).fill_nan(None)
    r = triage(df.with_columns(col))
    (spike,) = _kinds(r, "spike")
    assert spike["curve"] == "loss:web" and "non-finite" not in spike["evidence"]["summary"]
    assert r.summary["curves"]["loss:web"]["non_finite_steps"] == 0


def test_healthy_trend_is_fitted_before_a_lasting_break() -> None:
    """A malignant step up must not bend the power-law fit: it is fitted on what came before,
    and matches the fit of the same run without the step."""
    broken = triage(loss_curves.make("malignant_step")).curves["loss"].fit
    clean = loss_curves.healthy(6000)
    reference = triage(clean.filter(pl.col("step") < loss_curves.SPIKE_STEP)).curves["loss"].fit
    assert broken is not None and reference is not None
    assert broken.r2 > 0.9
    assert abs(broken.exponent - reference.exponent) < 0.01
