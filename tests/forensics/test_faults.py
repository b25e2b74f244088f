"""Fault and concurrency tests: a `forensics spike` (and triage) killed at every stage boundary,
and two runs into one --out at once.

The kill is deterministic: FORENSICS_FAULT_AT=NAME[:SIGNAL] makes the run send itself the
signal at a named point (forensics.fault_points.fault_point: `stage:<name>` as each spike stage
starts, `publish` after the first file of the output set is moved into place). What must hold:
one line on stderr, exit 128 + signal, and the output directory holds either the old complete
output (byte for byte) or nothing new.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forensics_testing.small_run import REPO, SPIKE_ARGS, cli, copy_run, snapshot

STAGES = ["open", "replay", "decode", "score", "cluster", "exposure", "report"]


def _interrupted(proc: subprocess.CompletedProcess, signal_name: str) -> None:
    """One line naming the signal, exit 128 + signal number."""
    import signal

    code = 128 + getattr(signal, signal_name)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code, (proc.returncode, proc.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith(f"interrupted ({signal_name})"), proc.stderr


def _published(folder: Path) -> dict[str, bytes]:
    """The output set (no cache, no lock)."""
    return {k: v for k, v in snapshot(folder).items() if not k.startswith(".")}


def _consistent(out: Path) -> None:
    """The published files describe one run: the report's skip ranges are skip.json's, the
    flags file is skip.json's megatron-lm flag."""
    skip = json.loads((out / "skip.json").read_text())
    report = json.loads((out / "report.json").read_text())
    assert report["skip"]["iterations"] == skip["iterations"]
    flag = skip["flags"]["megatron-lm"]["flag"]
    args = (out / "megatron_args.txt").read_text()
    assert flag in args if flag else "--iterations-to-skip" not in args


@pytest.mark.parametrize(
    ("stage", "signal_name"),
    [
        ("open", "SIGINT"),
        ("replay", "SIGTERM"),
        ("score", "SIGINT"),
        ("exposure", "SIGTERM"),
        ("report", "SIGINT"),
        ("report", "SIGTERM"),
    ],
)
def test_a_first_run_killed_at_a_stage_leaves_nothing(
    small_run: Path, tmp_path: Path, stage: str, signal_name: str
) -> None:
    run = copy_run(small_run, tmp_path / "run")
    out = tmp_path / "fresh"
    proc = cli(
        "spike",
        "--config",
        str(run / "forensics.yaml"),
        *SPIKE_ARGS,
        "--quiet",
        "--out",
        str(out),
        env={"FORENSICS_FAULT_AT": f"stage:{stage}:{signal_name}"},
    )
    _interrupted(proc, signal_name)
    assert not out.exists(), sorted(p.name for p in out.rglob("*"))


@pytest.mark.parametrize(
    ("stage", "signal_name"),
    [(s, "SIGTERM" if i % 2 else "SIGINT") for i, s in enumerate(STAGES)]
    + [("publish", "SIGINT"), ("publish", "SIGTERM")],
)
def test_a_forced_rerun_killed_keeps_the_old_complete_output(
    small_run: Path, tmp_path: Path, stage: str, signal_name: str
) -> None:
    """--force with another threshold (so the new set differs), killed: the old set is intact,
    or (killed while publishing: the signal waits for the moves) the new set is complete."""
    run = copy_run(small_run, tmp_path / "run")
    out = run / "spike"
    before = _published(out)
    proc = cli(
        "spike",
        "--config",
        str(run / "forensics.yaml"),
        *SPIKE_ARGS,
        "--threshold",
        "0.3",
        "--force",
        "--quiet",
        "--out",
        str(out),
        env={
            "FORENSICS_FAULT_AT": f"{'' if stage == 'publish' else 'stage:'}{stage}:{signal_name}"
        },
    )
    _interrupted(proc, signal_name)
    after = _published(out)
    if stage == "publish":
        assert after != before
        assert json.loads(after["skip.json"])["threshold"] == 0.3
    else:
        assert after == before
    _consistent(out)
    assert not (out / ".cache" / "staging").exists()


def test_a_killed_first_triage_leaves_nothing_and_a_killed_rerun_keeps_the_old_set(
    small_run: Path, tmp_path: Path
) -> None:
    log = small_run / "logs" / "train.log"
    out = tmp_path / "triage"
    proc = cli("triage", str(log), "--out", str(out), env={"FORENSICS_FAULT_AT": "publish"})
    assert proc.returncode == 143 and not proc.stderr.strip().count("\n")
    # killed while publishing: the signal waits, the set is complete
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "events.json",
        "report.md",
        "summary.json",
        "triage.png",
    ]
    before = _published(out)
    proc = cli("triage", str(log), "--out", str(out), "--force", "--recovery-window", "50")
    assert proc.returncode == 0, proc.stderr
    assert _published(out) != before


def test_two_spike_runs_into_one_out_one_wins(small_run: Path, tmp_path: Path) -> None:
    """Started together: one publishes, the other refuses with one line; the output is one
    run's complete, consistent set."""
    run = copy_run(small_run, tmp_path / "run")
    out = tmp_path / "both"
    env = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="400", PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "forensics.cli", "spike", "--config", str(run / "forensics.yaml")]
    cmd += [*SPIKE_ARGS, "--quiet", "--out", str(out)]
    procs = [
        subprocess.Popen(cmd + extra, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for extra in ([], ["--threshold", "0.3"])
    ]
    results = [(p.wait(timeout=300), p.stderr.read().decode()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    loser = next(err for code, err in results if code == 2).strip().splitlines()
    assert len(loser) == 1 and loser[0].startswith("error: "), loser
    assert "another forensics spike is writing" in loser[0] or "already exists" in loser[0]
    _consistent(out)


def test_a_run_started_while_another_holds_the_lock_refuses(
    small_run: Path, tmp_path: Path
) -> None:
    """Deterministic version of the race: the first run is paused (SIGSTOP) inside its report
    stage, holding the lock; the second refuses and leaves the first's directory alone."""
    run = copy_run(small_run, tmp_path / "run")
    out = run / "spike"
    before = _published(out)
    env = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="400", PYTHONPATH=str(REPO))
    env["FORENSICS_FAULT_AT"] = "stage:report:SIGSTOP"
    cmd = [sys.executable, "-m", "forensics.cli", "spike", "--config", str(run / "forensics.yaml")]
    cmd += [*SPIKE_ARGS, "--quiet", "--force", "--out", str(out)]
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while _state(first.pid) != "T":
            assert first.poll() is None and time.monotonic() < deadline, first.stderr.read()
            time.sleep(0.1)
        second = cli(
            "spike",
            "--config",
            str(run / "forensics.yaml"),
            *SPIKE_ARGS,
            "--quiet",
            "--force",
            "--out",
            str(out),
        )
        lines = second.stderr.strip().splitlines()
        assert second.returncode == 2 and len(lines) == 1, second.stderr
        assert "another forensics spike is writing into it right now" in lines[0]
        assert _published(out) == before
    finally:
        first.send_signal(__import__("signal").SIGCONT)
        assert first.wait(timeout=120) == 0, first.stderr.read()
    _consistent(out)


def _state(pid: int) -> str:
    """The process state letter from /proc (T: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
