"""On a malignant verdict: run `forensics spike` for that step in the background.

A subprocess (`python -m forensics.cli spike ... --out DIR/spike-S/ --quiet`), so the watcher
keeps reading while the replay, scoring and clustering run, and a crash there cannot take the
watcher down. Its output goes to DIR/spike-S.log. When it ends, the result message carries what
an engineer acts on, as the report's ACTION line says it: the culprit cluster, the action the
spike decided (skip.json `action`: remove and rebuild, or skip), the rollback iteration and the
flags file to restart with (from the spike's own report.json, skip.json and restart files); a
failure carries the last line of its error.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forensics.from_checkpoint import holds_checkpoint
from forensics.skip.action import rebuild_restart
from forensics.skip.flags import restart_line


@dataclass
class SpikeJob:
    """A running spike run: our child, or (after a watcher restart) one a previous watcher
    started, known by its pid."""

    step: int
    out: Path
    log: Path
    proc: subprocess.Popen[bytes] | None
    pid: int

    def returncode(self) -> tuple[bool, int | None]:
        """(finished, exit code); a run we did not start has no exit code we can read, so its
        outputs say how it ended."""
        if self.proc is not None:
            rc = self.proc.poll()
            return rc is not None, rc
        if pid_runs_spike(self.pid):
            return False, None
        done = (self.out / "report.json").exists() and (self.out / "skip.json").exists()
        return True, 0 if done else None


def pid_runs_spike(pid: int) -> bool:
    """True while `pid` is alive and is a `forensics spike` process (not a recycled pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"forensics.cli" in cmdline and b"spike" in cmdline


def run_source(config: str | None, from_checkpoint: str | None) -> tuple[str, ...] | None:
    """Where the spike run reads the run's description: `--config FILE`, or the trainer's save
    folder (`--from-checkpoint DIR`); None: no analysis to run."""
    if config:
        return ("--config", config)
    if from_checkpoint:
        return ("--from-checkpoint", from_checkpoint)
    return None


def source_saved(source: tuple[str, ...]) -> bool:
    """False while a save folder holds no checkpoint yet (the trainer has not saved)."""
    if source[0] != "--from-checkpoint":
        return True

    return holds_checkpoint(Path(source[1]))


def not_started_message(step: int, source: tuple[str, ...]) -> dict[str, Any]:
    folder = shlex.quote(source[1])
    return {
        "message": "forensics_not_started",
        "kind": "spike_forensics",
        "step": step,
        "summary": (
            f"forensics spike not started for step {step}: no checkpoint under {folder} yet "
            "(nothing to read the run from or roll back to); the plan is triage's"
        ),
    }


def started_message(job: SpikeJob, window: int) -> dict[str, Any]:
    return {
        "message": "forensics_started",
        "kind": "spike_forensics",
        "step": job.step,
        "window": window,
        "pid": job.pid,
        "out": str(job.out),
        "summary": (
            f"forensics spike --step {job.step} --window {window} started in the background "
            f"into {shlex.quote(str(job.out))} (before the verdict: the plan is ready when the "
            "verdict comes)"
        ),
    }


def spike_folder(step: int, domain: str | None = None) -> str:
    """The analysis folder's name: spike-<step>, or spike-<step>-<domain> (the domain's name
    kept to letters, digits, '.', '_' and '-', so it is one safe path word)."""
    if not domain:
        return f"spike-{step}"
    return f"spike-{step}-{re.sub(r'[^A-Za-z0-9._-]', '_', domain)}"


def start_spike(
    run_args: tuple[str, ...],
    step: int,
    window: int,
    watch_dir: Path,
    *,
    extra: tuple[str, ...] = (),
    force: bool = False,
    folder: str | None = None,
) -> SpikeJob:
    """Start `forensics spike` for `step` into watch_dir/<folder>/ (returns at once); the folder
    is spike-<step> unless named (`spike_folder`). `run_args`: where the run is described
    (`--config FILE` or `--from-checkpoint DIR`)."""
    out = watch_dir / (folder or spike_folder(step))
    log = watch_dir / f"{out.name}.log"
    cmd = [
        sys.executable,
        "-m",
        "forensics.cli",
        "spike",
        *run_args,
        "--step",
        str(step),
        "--window",
        str(window),
        "--out",
        str(out),
        "--quiet",
        *extra,
    ]
    if force:
        cmd.append("--force")
    with open(log, "wb") as fh:
        proc = subprocess.Popen(  # noqa: S603 - our own CLI, arguments from the watcher
            cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=os.environ
        )
    return SpikeJob(step=step, out=out, log=log, proc=proc, pid=proc.pid)


def paste_line(skip_file: Path) -> str | None:
    """The chosen trainer's restart line from skip.json (checkpoint pin and skip flag)."""
    if not skip_file.exists():
        return None

    plan = json.loads(skip_file.read_text())
    return restart_line(plan.get("flags", {}).get(plan.get("trainer")) or {})


def action_words(out: Path, plan: dict[str, Any], rollback: int | None) -> dict[str, Any]:
    """skip.json's action for a message: `action` (rebuild / remove / skip / none), the flags
    file to restart with and, in `action_text`, what to do in words, as the report's ACTION
    line says it."""
    action = plan.get("action") or {}
    kind = action.get("kind")
    trainer = plan.get("trainer")
    flags = out / f"restart-{trainer}.flags"
    flags_file = str(flags) if trainer and flags.exists() else None
    restart = "restart from " + (
        f"checkpoint iteration {rollback}" if rollback is not None else "the rollback checkpoint"
    )
    if flags_file:
        with_flags = f"{restart} with $(cat {shlex.quote(flags_file)})"
    else:
        refusal = ((plan.get("flags") or {}).get(trainer) or {}).get("refusal")
        with_flags = f"no {trainer} skip flag ({refusal}); remove the block list's documents"
    body: dict[str, Any] = {"action": kind, "flags_file": flags_file}
    if kind in ("rebuild", "remove"):
        if kind == "rebuild":
            where = action.get("rebuild_out") or out.parent / f"rebuild-{plan.get('step')}"
            action = {"rebuild_out": str(where), **action}
            text = f"ACTION remove and rebuild: {action['command']}, then {restart} "
            text += rebuild_restart(action, say_what=False)
            body["rebuild_flags_file"] = (
                action.get("restart_file") or f"{where}/restart-rebuilt.flags"
            )
        else:
            text = f"ACTION remove the culprit: {action['command']}, then {restart} on that data"
        if action.get("stopgap") and flags_file:
            text += f"; stopgap: {with_flags}"
    elif kind == "skip":
        text = f"ACTION skip: {with_flags}"
    elif kind == "none" or not plan.get("iterations"):
        text = "no data culprit: nothing to remove or skip (the data looks like the baseline)"
    else:  # a skip.json from before the action was decided
        text = with_flags
    return body | {"action_command": action.get("command"), "action_text": text}


def spike_result(step: int, out: Path, log: Path, returncode: int | None) -> dict[str, Any]:
    """What the finished spike run found (or why it failed), as a message body: the summary
    leads with the culprit and the ACTION skip.json decided (remove and rebuild, or skip), with
    the rollback iteration and the flags file to restart with."""
    report = out / "report.json"
    if returncode == 0 and report.exists():
        data = json.loads(report.read_text())
        skip_file = out / "skip.json"
        plan = json.loads(skip_file.read_text()) if skip_file.exists() else {}
        culprit = next((c for c in data.get("clusters", []) if c.get("id") == data["culprit"]), {})
        name = (
            f"{culprit['facet']}={culprit['key']}"
            if culprit.get("facet") and culprit.get("key") is not None
            else culprit.get("kind")
        )
        found = f"culprit {name} ({data['culprit']})" if data.get("culprit") else "no culprit"
        action = action_words(out, plan, data.get("rollback_iteration"))
        return {
            "ok": True,
            "out": str(out),
            "culprit": data.get("culprit"),
            "culprit_cluster": name,
            "culprit_first_iteration": data.get("culprit_first_iteration"),
            "rollback_iteration": data.get("rollback_iteration"),
            "rollback_note": data.get("rollback_note"),
            **action,
            "paste": paste_line(skip_file),
            "report": str(out / "report.md"),
            "summary": f"forensics spike for step {step}: {found}; {action['action_text']}; "
            f"report: {out / 'report.md'}",
        }
    tail = ""
    if log.exists():
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        tail = lines[-1] if lines else ""
    return {
        "ok": False,
        "out": str(out),
        "returncode": returncode,
        "summary": f"forensics spike for step {step} failed (exit {returncode}): {tail[:300]}",
        "log": str(log),
    }
