"""The plan triage hands over with every spike that has not come back: where to roll back, the
`forensics spike` command, the causes ranked from the evidence, and what will decide the verdict.

None of it waits for the verdict. A spike stays undecided until its recovery window has passed
(a benign spike can take hundreds of steps to come back: BLOOM tr1-13B's did), but the rollback
point and the replay can be prepared at once; the verdict only says whether to use them.
"""

from __future__ import annotations

from typing import Any

from forensics.rollback import Mark, Rollback, recommend_rollback
from forensics.triage.actions import CONFIG_PLACEHOLDER, cause_check
from forensics.triage.alarms import Alarm
from forensics.triage.causes import DATA, warning_chain
from forensics.triage.config import RunInfo, TriageConfig
from forensics.triage.spikes import Spike
from forensics.window import SPIKE_WINDOW, spike_window


def new_data_stage(onset: int, info: RunInfo) -> int | None:
    """The latest data stage (from the config) that began in the SPIKE_WINDOW iterations up to
    `onset`: new data the spike command's window replays. Stage 1 is the run's start, not new
    data."""
    starts = [s for s in info.stage_starts if s > 1 and onset - SPIKE_WINDOW < s <= onset]
    return max(starts) if starts else None


def warnings_before(onset: int, peak: int, alarms: list[Alarm], cfg: TriageConfig) -> list[Mark]:
    """Grad-norm alarms and loss-scale collapses the event followed (fired up to
    `alarm_lookahead_steps` before its onset and no later than its peak)."""
    lookback = onset - cfg.alarm_lookahead_steps
    names = {
        "grad_norm_alarm": "the grad-norm alarm",
        "loss_scale_collapse": "the loss-scale collapse",
    }
    return [
        Mark(a.step, names.get(a.kind, a.kind))
        for a in alarms
        if a.step <= peak and a.end_step >= lookback
    ]


def event_rollback(
    onset: int, peak: int, alarms: list[Alarm], info: RunInfo, cfg: TriageConfig, *, chain: bool
) -> Rollback:
    """forensics.rollback's rule for a loss event: new data (a stage switch shortly before the
    onset, from --config) is the evidence to go before; alarms the event followed are warnings.
    With `chain` (a divergence) the warnings reach back to the first of the train of alarms
    that led up to it (forensics.triage.causes.warning_chain): the last stable checkpoint is
    before the first burst, the start of a slow rise, the first loss-scale fall."""
    stage = new_data_stage(onset, info)
    mark = None if stage is None else Mark(stage, "the data stage that brought new data")
    warnings = warnings_before(onset, peak, alarms, cfg)
    if chain:
        names = {"grad_norm_alarm": "the first grad-norm alarm", "loss_scale_collapse": (
            "the first loss-scale collapse")}  # fmt: skip
        warnings += [
            Mark(a.step, names.get(a.kind, a.kind)) for a in warning_chain(alarms, onset, cfg)
        ]
    return recommend_rollback(
        onset, info.checkpoints, onset=mark, warnings=warnings, trainer=info.trainer
    )


def data_cause(onset: int, info: RunInfo) -> dict[str, object]:
    """0. The data: new data shortly before the onset (a stage switch) is the first suspect."""
    name = "the data (a bad batch, or new data in the blend)"
    stage = new_data_stage(onset, info)
    if stage is not None:
        return {
            "cause": name,
            "supported": True,
            "evidence": (
                f"a data stage began at iteration {stage}, {onset - stage} steps before the "
                "onset: new data entered the blend; `forensics spike` replays the window and "
                "names the documents"
            ),
        }
    if info.config_path is None or not info.config_read:
        return {
            "cause": name,
            "supported": None,
            "evidence": "pass --config to see the run's data stages; `forensics spike` compares "
            "the window's documents with the baseline's",
        }
    return {
        "cause": name,
        "supported": None,
        "evidence": (
            f"no data stage began in the {SPIKE_WINDOW} iterations before the onset; data "
            "already in the blend can still be the cause: `forensics spike` compares the "
            "window's documents with the baseline's"
        ),
    }


def decide_rule(spike: Spike, history: list[Spike], cfg: TriageConfig) -> dict[str, Any]:
    """What will decide an undecided spike: the level the loss must be back to, by which step.

    The verdict waits for the recovery window (never shortened: a slow benign spike must not be
    called malignant); this run's own benign spikes, when it has some, say by which step the
    loss should already be back if this one is like them."""
    target = spike.pre_level + spike.tolerance
    verdict_by = spike.peak_step + cfg.recovery_window
    out: dict[str, Any] = {"back_below": round(target, 6), "verdict_by_step": verdict_by}
    done = [s.recovery_steps for s in history if s.recovery_steps is not None]
    if done:
        slowest = max(done)
        back_by = min(spike.peak_step + slowest, verdict_by)
        out["back_by_step"] = back_by
        out["rule"] = (
            f"decide by step {back_by}: back below {target:.4g} by then, as this run's "
            f"{len(done)} earlier benign spike(s) were within {slowest} steps of their peak, or "
            f"it is slower than all of them: act on the plan (verdict final at step {verdict_by})"
        )
    else:
        out["back_by_step"] = verdict_by
        out["rule"] = (
            f"decide by step {verdict_by}: back below {target:.4g} by then, or malignant (no "
            f"earlier benign spike in this log to time it by; the {cfg.recovery_window}-step "
            "window because BLOOM tr1-13B's benign spike took ~500 steps)"
        )
    return out


def plan_fields(
    onset: int,
    peak: int,
    alarms: list[Alarm],
    info: RunInfo,
    cfg: TriageConfig,
    causes: list[dict[str, object]],
    *,
    chain: bool = False,
) -> dict[str, Any]:
    """The rollback point and the next command for an event's JSON: the data replay (`forensics
    spike`) where the data is supported or nothing else is, else the concrete check of the
    supported cause (forensics.triage.actions)."""
    rollback = event_rollback(onset, peak, alarms, info, cfg, chain=chain)
    cmd, note = next_command(onset, rollback.iteration, info)
    top = causes[0] if causes else None
    replay = top is None or top["supported"] is not True or top["cause"] == DATA
    fields: dict[str, Any] = {
        "rollback_iteration": rollback.iteration,
        "rollback_rule": rollback.rule,
        "next_command": cmd if replay else cause_check(top, onset, rollback.iteration, info),
        "spike_command": cmd,
        "replay_suggested": replay,
    }
    evidence: dict[str, Any] = {"rollback": rollback.note}
    if note:
        evidence["next_command_note"] = note
    return fields | {"_evidence": evidence}


def next_command(step: int, rollback: int, info: RunInfo) -> tuple[str, str | None]:
    """The `forensics spike` call that replays the window's documents, and a note: why this
    window, and whether the user must fill in the config."""
    import shlex

    window, why = spike_window(step, rollback)
    if info.window is not None:
        window, why = info.window, f"--window {info.window}: the window the spike runs with"
    # Quoted for the shell: a path with a space, or `$(...)` in a name, must paste as one word.
    config = shlex.quote(str(info.config_path)) if info.config_path else CONFIG_PLACEHOLDER
    source = f"--config {config}"
    if info.config_path is None and info.from_checkpoint:
        source = f"--from-checkpoint {shlex.quote(str(info.from_checkpoint))}"
    cmd = f"forensics spike {source} --step {step} --window {window} --out spike-{step}/"
    if info.config_path is None and not info.from_checkpoint:
        why += f"; replace {CONFIG_PLACEHOLDER} with the run's config (or pass --config to triage)"
    if info.train_iters is not None and step > info.train_iters:
        why += (
            f"; WARNING: step {step} is past the config's train_iters {info.train_iters}, so this "
            "log is not that config's run (or counts steps another way): spike will refuse it; "
            "check --config"
        )
    return cmd, why
