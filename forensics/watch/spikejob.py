"""On a malignant verdict: run `forensics spike` for that step in the background.

A subprocess (`python -m forensics.cli spike ... --out DIR/spike-S/ --quiet`), so the watcher
keeps reading while the replay, scoring and clustering run, and a crash there cannot take the
watcher down. Its output goes to DIR/spike-S.log. When it ends, the result message carries what
an engineer acts on: the culprit cluster, the rollback iteration and the flag line to paste
(from the spike's own report.json, skip.json and megatron_args.txt); a failure carries the last
line of its error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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


def start_spike(
    config: str,
    step: int,
    window: int,
    watch_dir: Path,
    *,
    extra: tuple[str, ...] = (),
    force: bool = False,
) -> SpikeJob:
    """Start `forensics spike` for `step` into watch_dir/spike-<step>/ (returns at once)."""
    out = watch_dir / f"spike-{step}"
    log = watch_dir / f"spike-{step}.log"
    cmd = [
        sys.executable,
        "-m",
        "forensics.cli",
        "spike",
        "--config",
        config,
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
    from forensics.skip.flags import restart_line

    plan = json.loads(skip_file.read_text())
    return restart_line(plan.get("flags", {}).get(plan.get("trainer")) or {})


def spike_result(step: int, out: Path, log: Path, returncode: int | None) -> dict[str, Any]:
    """What the finished spike run found (or why it failed), as a message body."""
    report = out / "report.json"
    if returncode == 0 and report.exists():
        data = json.loads(report.read_text())
        paste = paste_line(out / "skip.json")
        culprit = next((c for c in data.get("clusters", []) if c.get("id") == data["culprit"]), {})
        return {
            "ok": True,
            "out": str(out),
            "culprit": data.get("culprit"),
            "culprit_cluster": (
                f"{culprit['facet']}={culprit['key']}"
                if culprit.get("facet") and culprit.get("key") is not None
                else culprit.get("kind")
            ),
            "culprit_first_iteration": data.get("culprit_first_iteration"),
            "rollback_iteration": data.get("rollback_iteration"),
            "rollback_note": data.get("rollback_note"),
            "paste": paste,
            "report": str(out / "report.md"),
            "summary": (
                f"forensics spike for step {step}: culprit {data.get('culprit')} "
                f"({culprit.get('facet')}={culprit.get('key')}), roll back to "
                f"{data.get('rollback_iteration')}; paste: {paste or '(nothing to skip)'}"
            ),
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
