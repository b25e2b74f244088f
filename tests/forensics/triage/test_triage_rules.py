"""The field guide's rules, shape -> cause -> action (../shared/notes/field-guide.md), each on a
generated log whose answer a senior engineer reads at a glance (forensics_testing.loss_curves
.rule_case): triage's verdict, top cause and action."""

from __future__ import annotations

import pytest

from forensics.triage.analyze import triage
from forensics.triage.causes import CLIP, DATA, DEVICE, LOSS_SCALE, LR
from forensics_testing import loss_curves
from forensics_testing.repo_paths import SHARED


def _events(name: str, kind: str) -> list[dict]:
    return [e for e in triage(loss_curves.rule_case(name)).events if e["kind"] == kind]


def _top(ev: dict) -> dict:
    return ev["likely_causes"][0]


def _consistent(ev: dict) -> None:
    """Every cause carries its evidence, and the ranking never contradicts its flags:
    supported, then cannot tell, then ruled out."""
    ranks = [{True: 0, None: 1, False: 2}[c["supported"]] for c in ev["likely_causes"]]
    assert ranks == sorted(ranks)
    assert all(c["evidence"] for c in ev["likely_causes"])


# ------------------------------------------------------------------- 1. against the trajectory


def test_back_to_its_level_but_not_its_trajectory_is_malignant() -> None:
    (spike,) = _events("off_trajectory", "spike")
    ev = spike["evidence"]
    assert spike["verdict"] == "malignant" and "not to its trajectory" in ev["summary"]
    # Both numbers: back under the old level, well above the extrapolated trend.
    assert ev["excess_over_pre_level"] < ev["tolerance"] < ev["excess_over_trend"]
    assert 0.1 < ev["excess_over_trend"] < 0.25
    assert _top(spike)["cause"] == DATA and "trajectory" in _top(spike)["evidence"]


def test_benign_spike_is_back_on_its_trajectory_and_numerical() -> None:
    (spike,) = [e for e in triage(loss_curves.make("benign_spike")).events if e["kind"] == "spike"]
    ev = spike["evidence"]
    assert spike["verdict"] == "benign" and abs(ev["excess_over_trend"]) < ev["tolerance"]
    assert _top(spike)["cause"].startswith("numerical: one huge gradient")
    assert spike["action"].startswith("nothing")


# ------------------------------------------------------------------- 2. causes from evidence


def test_lasting_step_is_data_first_not_a_device() -> None:
    (spike,) = _events("lasting_step", "spike")
    assert spike["verdict"] == "malignant"
    _consistent(spike)
    assert _top(spike)["cause"] == DATA and _top(spike)["supported"] is True
    assert "a lasting step" in _top(spike)["evidence"]
    device = next(c for c in spike["likely_causes"] if c["cause"] == DEVICE)
    assert device["supported"] is None and "no device evidence" in device["evidence"]
    assert spike["next_command"].startswith("forensics spike") and spike["replay_suggested"]
    assert spike["action"].startswith("roll back to iteration 2900 and replay the window")


def test_device_first_only_on_device_evidence() -> None:
    (spike,) = _events("noisy_step", "spike")
    _consistent(spike)
    assert _top(spike)["cause"] == DEVICE and "noisier" in _top(spike)["evidence"]
    assert spike["likely_causes"][1]["cause"] == DATA  # still supported: it did not come back
    assert spike["next_command"].startswith("find the device") and not spike["replay_suggested"]


# ------------------------------------------------------------------- 5. divergence: emergency


@pytest.mark.parametrize(
    ("name", "cause", "check"),
    [
        ("lr_divergence", LR, "check the lr schedule"),
        ("clip_divergence", CLIP, "check --clip-grad"),
        ("fp16_collapse", LOSS_SCALE, "check the fp16 loss scaler"),
    ],
)
def test_divergence_stops_now_and_checks_the_supported_cause(
    name: str, cause: str, check: str
) -> None:
    (div,) = _events(name, "divergence")
    _consistent(div)
    assert _top(div)["cause"] == cause and _top(div)["supported"] is True
    assert div["action"].startswith("STOP NOW: stop the run and roll back")
    # The replay only where the data is supported or nothing else is.
    assert div["next_command"].startswith(check) and not div["replay_suggested"]
    assert div["spike_command"].startswith("forensics spike")


def test_divergence_rolls_back_before_the_first_warning() -> None:
    (div,) = _events("clip_divergence", "divergence")
    assert div["rollback_iteration"] < 2000 <= div["step"]  # the bursts began at 2000
    assert "7 grad-norm bursts from step 2000" in _top(div)["evidence"]
    (div,) = _events("fp16_collapse", "divergence")
    assert div["rollback_iteration"] < 2000  # the scale began falling at 2000


def test_divergence_with_nothing_supported_replays_the_data() -> None:
    (div,) = _events("slow_grad_rise", "divergence")
    assert _top(div)["supported"] is not True and div["replay_suggested"]
    assert div["next_command"].startswith("forensics spike")
    assert div["action"].startswith("STOP NOW")


# ------------------------------------------------------------------- 3. curves together


def test_one_domain_alone_is_that_domains_data_everywhere() -> None:
    from forensics.triage.plot import triage_figure
    from forensics.triage.report import terminal_lines

    r = triage(loss_curves.rule_case("domain_alone"))
    (spike,) = [e for e in r.events if e["kind"] == "spike"]  # one incident, not one per curve
    assert spike["scope"] == "one domain" and spike["domain"] == "code"
    assert spike["curve"] == "loss:code" and spike["curves"] == ["loss", "loss:code"]
    _consistent(spike)
    assert _top(spike)["cause"] == DATA and "only the code curve moved" in _top(spike)["evidence"]
    assert spike["next_command"].endswith("--out spike-3000-code/")
    assert "code documents" in spike["evidence"]["next_command_note"]
    lines = "\n".join(terminal_lines(r))
    assert "spike on loss:code alone" in lines and "top cause the data" in lines
    fig = triage_figure(r)
    assert any("code alone" in t.get_text() for t in fig.axes[0].texts)


def test_every_domain_at_once_is_one_incident_numerics_first() -> None:
    r = triage(loss_curves.rule_case("domains_together"))
    (spike,) = [e for e in r.events if e["kind"] == "spike"]
    assert spike["scope"] == "all domains" and len(spike["curves"]) == 4
    _consistent(spike)
    assert _top(spike)["cause"].startswith("numerics or the optimizer")
    data = next(c for c in spike["likely_causes"] if c["cause"] == DATA)
    assert data["supported"] is None
    assert spike["next_command"].startswith("check the optimizer and numerics")
    assert not spike["replay_suggested"]


# ------------------------------------------------------------------- 4. recurrence


def test_recurring_benign_spikes_are_a_run_level_finding() -> None:
    r = triage(loss_curves.rule_case("recurring"))
    spikes = [e for e in r.events if e["kind"] == "spike"]
    assert len(spikes) == 8 and {e["verdict"] for e in spikes} == {"benign"}
    (rec,) = [e for e in r.events if e["kind"] == "recurring_spikes"]
    assert rec["count"] == 8 and rec["step"] == 1000 and rec["end_step"] == 7300
    assert rec["per_1000_steps"] == pytest.approx(1.0, abs=0.01)
    # 20 s per iteration: 8 in 44.4 h is 4.3 a day, far past "once or twice a month".
    assert rec["per_day"] == pytest.approx(4.32, abs=0.01)
    assert "if the data is clean" in rec["finding"].lower()
    assert "lower the lr by a third (at the latest spike 0.000183 -> 0.000122)" in rec["finding"]
    assert "forensics spike --config <run-config.yaml> --step 7300" in rec["finding"]
    assert r.summary["status"] == "watch"


def test_one_benign_spike_is_no_finding() -> None:
    r = triage(loss_curves.make("benign_spike"))
    assert not [e for e in r.events if e["kind"] == "recurring_spikes"]


# ------------------------------------------------------------------- 6. fp16 loss scale


def test_fp16_collapse_explains_a_long_flat_stretch_and_zero_norm_is_underflow() -> None:
    r = triage(loss_curves.rule_case("fp16_collapse"))
    (div,) = [e for e in r.events if e["kind"] == "divergence"]
    (collapse,) = [e for e in r.events if e["kind"] == "loss_scale_collapse"]
    assert collapse["step"] == 2000 and div["step"] - collapse["step"] > 1500  # > the window
    assert _top(div)["cause"] == LOSS_SCALE and "underflowed" in _top(div)["evidence"]
    assert "exactly 0" in div["evidence"]["grad_norm_before"]
    assert "not logged" not in div["evidence"]["grad_norm_before"]


# ------------------------------------------------------------------- 7. grad-norm alarms


def test_slow_tenfold_grad_norm_rise_alarms_with_its_lead() -> None:
    r = triage(loss_curves.rule_case("slow_grad_rise"))
    (alarm,) = [e for e in r.events if e["kind"] == "grad_norm_alarm"]
    (div,) = [e for e in r.events if e["kind"] == "divergence"]
    assert alarm["mode"] == "sustained" and 2800 <= alarm["step"] <= 3200
    assert alarm["loss_onset_step"] == div["step"] and alarm["led_loss_onset_by"] > 800
    assert div["rollback_iteration"] < alarm["step"]


def test_fast_burst_alarm_is_kept() -> None:
    r = triage(loss_curves.make("benign_spike"))
    (alarm,) = [e for e in r.events if e["kind"] == "grad_norm_alarm"]
    assert alarm["mode"] == "burst" and alarm["led_loss_peak_by"] == 3


# ------------------------------------------------------------------- 8. slow climb


def test_slow_climb_is_a_watch_event_with_its_slope() -> None:
    r = triage(loss_curves.rule_case("slow_climb"))
    (climb,) = [e for e in r.events if e["kind"] == "slow_climb"]
    assert r.summary["status"] == "watch" and not [e for e in r.events if e["kind"] == "plateau"]
    assert 3800 <= climb["step"] <= 4500 and climb["end_step"] == 8000
    assert 0.02 < climb["slope_per_1000_steps"] < 0.05
    assert climb["action"].startswith("WATCH")


# ------------------------------------------------------------------- 9. time


def test_plateau_and_thresholds_in_time_where_iteration_time_is_logged() -> None:
    r = triage(loss_curves.rule_case("timed_plateau"))
    (plateau,) = [e for e in r.events if e["kind"] == "plateau"]
    span = plateau["end_step"] - plateau["step"]
    assert plateau["duration_hours"] == pytest.approx(span * 90 / 3600, abs=0.01)
    assert plateau["duration_days"] > 3 and "days)" in plateau["evidence"]["summary"]
    assert r.summary["time"]["plateau_steps_in_time"] == "2.1 days"
    assert triage(loss_curves.make("plateau_capacity")).summary["time"] is None


# ------------------------------------------------------------------- the same, logged sparsely


@pytest.mark.parametrize(
    ("name", "kind", "cause"),
    [
        ("lasting_step", "spike", DATA),
        ("noisy_step", "spike", DEVICE),
        ("lr_divergence", "divergence", LR),
        ("clip_divergence", "divergence", CLIP),
        ("fp16_collapse", "divergence", LOSS_SCALE),
    ],
)
def test_rules_hold_on_a_log_written_every_10_steps(name: str, kind: str, cause: str) -> None:
    import polars as pl

    df = loss_curves.rule_case(name).filter(pl.col("step") % 10 == 0)
    r = triage(df)
    (ev,) = [e for e in r.events if e["kind"] in ("spike", "divergence")]
    assert ev["kind"] == kind and _top(ev)["cause"] == cause
    _consistent(ev)


def test_sparse_slow_grad_rise_is_sustained_not_bursts() -> None:
    import polars as pl

    r = triage(loss_curves.rule_case("slow_grad_rise").filter(pl.col("step") % 10 == 0))
    (alarm,) = [e for e in r.events if e["kind"] == "grad_norm_alarm"]
    (div,) = [e for e in r.events if e["kind"] == "divergence"]
    assert alarm["mode"] == "sustained" and alarm["led_loss_onset_by"] > 800
    clip = next(c for c in div["likely_causes"] if c["cause"] == CLIP)
    assert clip["supported"] is None and "not bursts" in clip["evidence"]


# ------------------------------------------------------------------- real logs


needs_shared = pytest.mark.skipif(
    not (SHARED / "curves").is_dir(), reason="../shared/curves not present"
)


@needs_shared
@pytest.mark.filterwarnings("ignore")
def test_bloom176b_spike_is_numerical_and_left_alone() -> None:
    from forensics.triage.readers import read_log

    r = triage(read_log(SHARED / "curves" / "bloom176b_spike_31216_snippet.csv"))
    (spike,) = [e for e in r.events if e["kind"] == "spike"]
    assert spike["verdict"] == "benign" and spike["action"].startswith("nothing")
    assert _top(spike)["cause"].startswith("numerical: one huge gradient")
    assert "announced by the grad-norm alarm" in _top(spike)["cause"]


@needs_shared
@pytest.mark.filterwarnings("ignore")
def test_bloom104b_divergence_is_an_emergency() -> None:
    from forensics.triage.readers import read_log

    log = SHARED / "curves" / "megatron_logs" / "train_tr8-104B-wide_chronicles.log"
    r = triage(read_log(log))
    (div,) = [e for e in r.events if e["kind"] == "divergence"]
    assert div["action"].startswith("STOP NOW") and div["rollback_iteration"] < div["step"]
    _consistent(div)
    # The log starts mid-run at peak lr: the lr cannot be judged, not "supported".
    lr = next(c for c in div["likely_causes"] if c["cause"] == LR)
    assert lr["supported"] is None and "not in view" in lr["evidence"]


@needs_shared
@pytest.mark.filterwarnings("ignore")
def test_megatron_ci_log_states_the_plateau_length_in_time() -> None:
    from forensics.triage.readers import read_log

    r = triage(read_log(SHARED / "curves" / "mlm_gpt__gpt3_15b_8t_release__dev_dgx_h100.csv"))
    t = r.summary["time"]
    # Megatron's `iteration-time` (seconds): ~1.46 s per step, so 2000 steps is 0.8 h.
    assert t is not None and 1.0 < t["seconds_per_step"] < 2.0
    assert t["plateau_steps_in_time"] == "0.8 h"
    assert r.summary["status"] == "healthy"


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("clip_divergence", "- **action**: STOP NOW: stop the run and roll back to iteration 1999"),
        ("recurring", "### Recurring spikes from iteration 1000: run-level finding"),
        ("slow_climb", "### Slow climb, iterations"),
        ("slow_grad_rise", "### Grad-norm alarm (sustained rise) at iteration"),
    ],
)
def test_report_says_the_rule(name: str, says: str) -> None:
    from forensics.triage.report import render_markdown

    assert says in render_markdown(triage(loss_curves.rule_case(name)), "x.log", "megatron")
