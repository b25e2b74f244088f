"""What `watch` says when its alerts do not arrive, and the details of its options: every message
a webhook never took is named on the terminal and in state.json, and the watcher exits non-zero;
a receiver that accepts and never answers costs bounded time, also under SIGTERM / SIGINT;
--interval must be finite; --spike-args' --window is the window the messages name."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from rich.console import Console

from forensics.commands.watch import _refuse_undelivered, _spike_window
from forensics.errors import ForensicsError
from forensics.triage.config import RunInfo, TriageConfig
from forensics.watch.loop import Watcher, WatchOptions
from forensics.watch.terminal import Terminal
from forensics_testing import loss_curves
from forensics_testing.refusal import refused
from forensics_testing.silent_server import closed_port, silent_server
from forensics_testing.small_run import REPO

CFG = TriageConfig(recovery_window=200)


@pytest.fixture(scope="module")
def malignant_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CSV log whose spike at step 3000 is malignant (raised and judged in one poll)."""
    log = tmp_path_factory.mktemp("log") / "train.csv"
    loss_curves.make("malignant_step", n=3400).select("step", "loss", "grad_norm").write_csv(log)
    return log


def _watch_once(log: Path, out: Path, url: str) -> tuple[Watcher, list[dict], str]:
    screen = io.StringIO()
    terminal = Terminal(Console(file=screen, width=300), str(log), live=False)
    opts = WatchOptions(log=log, out=out, cfg=CFG, webhook=url, webhook_backoff_s=0.01)
    watcher = Watcher(opts, terminal)
    msgs = watcher.poll()
    watcher.close()
    return watcher, msgs, screen.getvalue()


def test_a_closed_port_every_alert_named_on_screen_in_state_and_exit(
    malignant_log: Path, tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{closed_port()}/hook"
    watcher, msgs, screen = _watch_once(malignant_log, tmp_path / "w", url)
    seqs = [m["seq"] for m in msgs]
    assert len(seqs) >= 2  # the spike (malignant) and its plan
    assert [e["seq"] for e in watcher.undelivered] == seqs
    assert all("Connection refused" in e["error"] for e in watcher.undelivered)
    for seq in seqs:
        assert f"message #{seq} (" in screen and "not delivered: " in screen
    state = json.loads((tmp_path / "w" / "state.json").read_text())
    assert [e["seq"] for e in state["undelivered"]] == seqs
    assert state["undelivered"][0]["kind"] == "spike"
    with pytest.raises(ForensicsError, match=rf"{len(seqs)} message\(s\) never delivered \(#1"):
        _refuse_undelivered(watcher, url, tmp_path / "w")


def test_a_restarted_watcher_does_not_fail_again_for_what_it_reported(
    malignant_log: Path, tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{closed_port()}/hook"
    _watch_once(malignant_log, tmp_path / "w", url)
    again, msgs, _ = _watch_once(malignant_log, tmp_path / "w", url)
    assert msgs == [] and again.undelivered  # still listed in state.json
    _refuse_undelivered(again, url, tmp_path / "w")  # but this run lost nothing new


def test_every_message_delivered_is_not_reported(malignant_log: Path, tmp_path: Path) -> None:
    from forensics_testing.webhook_receiver import Receiver, serve_webhook

    with serve_webhook() as url:
        watcher, msgs, screen = _watch_once(malignant_log, tmp_path / "w", url)
    assert [b["seq"] for b in Receiver.bodies] == [m["seq"] for m in msgs]
    assert watcher.undelivered == [] and "not delivered" not in screen
    _refuse_undelivered(watcher, url, tmp_path / "w")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_receiver_that_never_answers_under_a_signal(
    malignant_log: Path, tmp_path: Path, sig: int
) -> None:
    """The CLI against a server that accepts and never answers, stopped by a signal while it
    POSTs: it ends at once (bounded wait), names each alert not delivered and exits 2."""
    out = tmp_path / "w"
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="300")
    with silent_server() as (host, port):
        cmd = [sys.executable, "-m", "forensics.cli", "watch", str(malignant_log), "--out"]
        cmd += [str(out), "--interval", "0.05", "--no-live", "--recovery-window", "200"]
        cmd += ["--webhook", f"http://{host}:{port}/hook"]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while not (out / "state.json").exists() and time.monotonic() < deadline:
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.05)
            proc.send_signal(sig)
            stdout, stderr = proc.communicate(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    err = stderr.decode()
    assert proc.returncode == 2, err
    assert err.count("\n") == 1 and "never delivered (#1 spike" in err, err
    assert "not delivered: not sent before the watcher stopped" in stdout.decode()
    state = json.loads((out / "state.json").read_text())
    assert state["undelivered"] and all(e["retried"] for e in state["undelivered"])


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
@pytest.mark.parametrize("flag", ["--interval", "--stall-after"])
def test_seconds_must_be_finite_and_positive(tmp_path: Path, flag: str, value: str) -> None:
    """nan compares false with everything: a nan interval would poll in a busy loop."""
    from typer.testing import CliRunner

    from forensics.cli import app

    log = str(tmp_path / "x.log")
    result = CliRunner().invoke(app, ["watch", log, flag, value, "--max-polls", "1"])
    refused(result, f"{flag} {float(value)}: must be a positive number of seconds")
    assert list(tmp_path.iterdir()) == []


def test_spike_args_window_is_taken_out_and_checked() -> None:
    assert _spike_window(("--embed-cap", "0", "--window", "100")) == (100, ("--embed-cap", "0"))
    assert _spike_window(("--window=40",)) == (40, ())
    assert _spike_window(("--embed-cap", "0")) == (None, ("--embed-cap", "0"))
    for bad in (("--window", "x"), ("--window",), ("--window=0",)):
        with pytest.raises(ForensicsError, match="--spike-args: --window"):
            _spike_window(bad)


def test_the_spike_runs_with_and_messages_name_the_window_of_spike_args(
    malignant_log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--spike-args '--window 100': the background spike gets --window 100 (once), and the
    started message and the suggested `next:` command say 100, not triage's own choice."""
    import forensics.watch.planning as planning
    from forensics.watch.spikejob import SpikeJob

    started: list[tuple[int, tuple[str, ...]]] = []

    def fake_start(source, step, window, watch_dir, *, extra=(), force=False, folder=None):  # noqa: ANN001
        started.append((window, extra))
        out = watch_dir / f"spike-{step}"
        return SpikeJob(step, out, watch_dir / f"spike-{step}.log", None, pid=0)

    monkeypatch.setattr(planning, "start_spike", fake_start)
    config = tmp_path / "run.yaml"
    config.write_text("not read: the spike is not started for real\n")
    opts = WatchOptions(
        log=malignant_log,
        out=tmp_path / "w",
        cfg=CFG,
        config=str(config),
        run=RunInfo(config_path=str(config), window=100),
        spike_args=("--embed-cap", "0"),
    )
    watcher = Watcher(opts)
    msgs = watcher.poll()
    watcher.close()
    assert started == [(100, ("--embed-cap", "0"))]
    began = next(m for m in msgs if m["message"] == "forensics_started")
    assert began["window"] == 100 and "--window 100 started" in began["summary"]
    nexts = [m["summary"] for m in msgs if "next: forensics spike" in m["summary"]]
    assert nexts and all("--window 100 " in s for s in nexts), nexts


def test_windows_untouched_without_spike_args(malignant_log: Path) -> None:
    """The same log without --spike-args: triage picks the window (not 100), so the test
    above can tell the two apart."""
    from forensics.triage.analyze import triage
    from forensics.triage.readers import read_log

    events = triage(read_log(malignant_log), CFG, RunInfo()).events
    spike = next(e for e in events if e["kind"] == "spike")
    assert "--window 100 " not in spike["next_command"]
    assert pl.Series([spike["next_command"]]).str.contains(r"--window \d+ ").all()
