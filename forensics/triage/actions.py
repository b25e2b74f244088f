"""What to do about an event, in one line, following its supported cause.

The field guide's actions (../shared/notes/field-guide.md): a spike that came back is left
alone; one that did not is rolled back 50-100 steps before it and its window's data replayed and
skipped; a divergence is an emergency: stop now, roll back to the last stable checkpoint before
the first warning, and check the supported cause (the lr schedule, the clip, the fp16 loss
scaler, a device). The data replay is the next command only where the data is supported or
nothing else is.
"""

from __future__ import annotations

import shlex
from typing import Any

from forensics.triage.causes import CLIP, DATA, DEVICE, LOSS_SCALE, LR, NUMERICS
from forensics.triage.config import RunInfo

CONFIG_PLACEHOLDER = "<run-config.yaml>"  # a command's config when triage was given none


def _config(info: RunInfo) -> str:
    return shlex.quote(str(info.config_path)) if info.config_path else CONFIG_PLACEHOLDER


def cause_check(cause: dict[str, object], step: int, rollback: int, info: RunInfo) -> str:
    """The concrete check for a supported cause other than the data (one line, the config's
    path quoted for the shell)."""
    name, config = cause["cause"], _config(info)
    if name == LR:
        return (
            f"check the lr schedule in {config} (peak lr, --lr-warmup-iters): restart from "
            f"iteration {rollback} with the peak lr lowered (e.g. halved) or a longer warmup"
        )
    if name == CLIP:
        return (
            f"check --clip-grad in {config} (0 or unset disables clipping; 1.0 is usual) and "
            f"that clipping is applied; restart from iteration {rollback} with it set"
        )
    if name == LOSS_SCALE:
        return (
            f"check the fp16 loss scaler in {config} (--initial-loss-scale, --min-loss-scale, "
            f"--loss-scale-window) or train in bf16; restart from iteration {rollback}"
        )
    if name == DEVICE:
        return (
            f"find the device: compare per-rank losses and DCGM/ECC logs around step {step}, "
            f"rerun step {step} on other nodes; restart from iteration {rollback} without it"
        )
    if name == NUMERICS:
        return (
            f"check the optimizer and numerics in {config} (--clip-grad, the peak lr, bf16/fp16 "
            f"settings): every domain moved at once; restart from iteration {rollback}"
        )
    return f"check: {name}"


def top_cause(ev: dict[str, Any]) -> dict[str, Any] | None:
    causes = ev.get("likely_causes") or []
    return causes[0] if causes else None


def event_action(ev: dict[str, Any]) -> str:
    """The event's action, in one line, from its kind, verdict and top cause."""
    kind, top = ev["kind"], top_cause(ev)
    first = f"{top['cause']}" if top else "unknown"
    if kind == "divergence":
        return (
            f"STOP NOW: stop the run and roll back to iteration {ev['rollback_iteration']}, the "
            f"last stable checkpoint before the first warning; then check {first}: "
            f"{ev['next_command']}"
        )
    if kind == "spike" and ev.get("verdict") == "malignant":
        if top is not None and top["cause"] == DATA:
            return (
                f"roll back to iteration {ev['rollback_iteration']} and replay the window "
                f"(`{ev['spike_command']}`): skip the dirty stretch in the dataloader on restart, "
                "not a lower lr"
            )
        return f"roll back to iteration {ev['rollback_iteration']}; then {ev['next_command']}"
    if kind == "spike" and ev.get("verdict") == "undecided":
        return (
            f"prepare: {ev['decide']['rule']}; rollback {ev['rollback_iteration']} and "
            f"`{ev['next_command']}` are ready"
        )
    return ""
