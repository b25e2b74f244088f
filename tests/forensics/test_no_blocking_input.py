"""No command blocks on an input: a FIFO, a device or a socket is refused in one line naming it,
before anything opens it (a FIFO nobody writes to would block `open()` forever, /dev/zero never
ends); a remote engine that accepts and never answers is refused within its connect timeout; and
SIGTERM / SIGINT end a command at once, leaving nothing half-written.

Every command runs in a subprocess with a bounded wait: a hang fails the test instead of
stalling the suite."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dataloaders.regular_files import check_input_path, open_regular
from forensics.errors import ForensicsError
from forensics_testing.refusal import one_line_error
from forensics_testing.silent_server import closed_port, silent_server
from forensics_testing.small_run import REPO, SMALL, cli, copy_run

BOUND_S = 60  # generous for a loaded 2-core machine; without the guard these never end


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.jsonl"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["score", "{fifo}", "--out", "{tmp}/s.parquet"], "{fifo}: is a FIFO"),
        (["triage", "{fifo}", "--out", "{tmp}/t"], "{fifo}: is a FIFO"),
        (["watch", "{fifo}", "--out", "{tmp}/w", "--max-polls", "1"], "{fifo}: is a FIFO"),
        (["watch", "/dev/zero", "--out", "{tmp}/w", "--max-polls", "1"], "a character device"),
        (["manifest", "{fifo}", "--fields", "url"], "{fifo}: is a FIFO"),
        (["check-skip", "{fifo}", "--config", "{tmp}/c.yaml"], "{fifo}: is a FIFO"),
        (
            ["replay", "--config", "{fifo}", "--step", "3", "--out", "{tmp}/r.parquet"],
            "--config {fifo}: is a FIFO",
        ),  # fmt: skip
        (
            ["spike", "--megatron-args", "@{fifo}", "--step", "3", "--out", "{tmp}/s"],
            "--megatron-args {fifo}: is a FIFO",
        ),  # fmt: skip
        (["score", "/etc/hostname", "--out", "{fifo}"], "--out {fifo}: is a FIFO"),
    ],
)
def test_a_fifo_or_device_is_refused_in_one_line(
    tmp_path: Path, fifo: Path, argv: list[str], needle: str
) -> None:
    args = [a.format(fifo=fifo, tmp=tmp_path) for a in argv]
    proc = cli(*args, cwd=tmp_path, timeout=BOUND_S)
    one_line_error(proc, needle.format(fifo=fifo))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe.jsonl"]  # nothing written


def test_a_run_config_naming_a_fifo_is_refused_by_file(small_run: Path, tmp_path: Path) -> None:
    run = copy_run(small_run, tmp_path / "run")
    data = run / "data" / "prose_text_document.bin"
    data.unlink()
    os.mkfifo(data)
    step = str(SMALL.spike_iteration)
    proc = cli("replay", "--step", step, "--window", "2", "--out", "w.parquet", cwd=run)
    one_line_error(proc, f"{data}: is a FIFO")
    assert not (run / "w.parquet").exists()


def test_open_regular_never_blocks_and_says_what_the_file_is(fifo: Path, tmp_path: Path) -> None:
    with pytest.raises(ForensicsError, match=r"pipe\.jsonl: is a FIFO or pipe, not a regular file"):
        open_regular(fifo)  # without O_NONBLOCK this open would wait for a writer forever
    with pytest.raises(ForensicsError, match="/dev/null: is a character device"):
        check_input_path("/dev/null")
    plain = tmp_path / "plain.log"
    plain.write_text("x\n")
    check_input_path(plain)
    check_input_path(tmp_path / "missing.log")  # the reader says "no such file" in its words
    with open_regular(plain) as fh:
        assert fh.read() == b"x\n"


def test_watch_refuses_a_log_replaced_by_a_fifo_while_it_follows(tmp_path: Path) -> None:
    """The log rotated into a FIFO: the follower's next open would block; it is refused."""
    from forensics.watch.loop import Watcher, WatchOptions

    log = tmp_path / "train.log"
    log.write_text(" iteration 1/ 10 | lm loss: 3.0 |\n iteration 2/ 10 | lm loss: 2.9 |\n")
    watcher = Watcher(WatchOptions(log=log, out=tmp_path / "w", interval=0.05))
    try:
        watcher.poll()
        log.rename(tmp_path / "train.log.1")
        os.mkfifo(log)
        with pytest.raises(ForensicsError, match=r"train\.log: is a FIFO"):
            watcher.poll()
    finally:
        watcher.close()


def interrupt_when(cmd: list[str], cwd: Path, ready: str, sig: int) -> tuple[int, str, str]:
    """Start `forensics CMD`, wait until its stdout shows `ready`, send `sig`; (exit code,
    stdout, stderr). Every wait is bounded: a command that does not end fails the test."""
    import selectors

    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="300")
    proc = subprocess.Popen(
        [sys.executable, "-m", "forensics.cli", *cmd],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = ""
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + BOUND_S
            while ready not in seen and time.monotonic() < deadline:
                if sel.select(timeout=0.1):
                    line = proc.stdout.readline()
                    if not line:
                        break
                    seen += line
        assert ready in seen and proc.poll() is None, (seen, proc.poll())
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=10)
        return proc.returncode, seen + out, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_watch_waiting_for_a_missing_log_says_so_and_ends_on_a_signal(
    tmp_path: Path, sig: int
) -> None:
    """A log that does not exist yet: one line says the watcher waits for it, and SIGTERM /
    SIGINT end the wait at once."""
    log = tmp_path / "later.log"
    cmd = ["watch", str(log), "--out", str(tmp_path / "w"), "--interval", "0.05", "--no-live"]
    rc, out, err = interrupt_when(cmd, tmp_path, "waiting for it to appear", sig)
    # 0: the watcher's own clean stop; 128 + signal: the signal came before its loop started
    # (the one `interrupted` line of every command)
    assert rc in (0, 128 + sig), (rc, err)
    assert (not err) if rc == 0 else err.startswith("interrupted ("), err
    assert f"{log}: does not exist yet; waiting for it to appear" in out


def test_watch_refuses_a_log_whose_folder_does_not_exist(tmp_path: Path) -> None:
    proc = cli("watch", str(tmp_path / "typo" / "train.log"), "--max-polls", "1", cwd=tmp_path)
    one_line_error(proc, "train.log: neither it nor its folder exists")
    assert list(tmp_path.iterdir()) == []


def test_scan_on_a_ray_address_that_never_answers_is_refused(
    small_run: Path, tmp_path: Path
) -> None:
    """A server that accepts and never answers: refused within the connect timeout, in one line,
    and the scan's folder (`OUT/.scan/`) is never made."""
    run = copy_run(small_run, tmp_path / "run")
    first, last = str(SMALL.spike_iteration - 3), str(SMALL.spike_iteration)
    scan = ["scan", "--from", first, "--to", last, "--out", "sc", "--quiet", "--engine", "ray"]
    with silent_server() as (host, port):
        proc = cli(*scan, "--ray-address", f"{host}:{port}", cwd=run, timeout=BOUND_S)
    one_line_error(proc, f"--ray-address {host}:{port}: no answer in 5 s")
    proc = cli(*scan, "--ray-address", f"127.0.0.1:{closed_port()}", cwd=run, timeout=BOUND_S)
    one_line_error(proc, "no Ray head reachable there")
    assert not (run / "sc").exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_scan_waiting_on_a_silent_ray_address_ends_on_a_signal(
    small_run: Path, tmp_path: Path, sig: int
) -> None:
    """SIGTERM / SIGINT while the scan waits for the Ray address's answer: it ends at once
    (128 + signal, one line), and no scan folder is left."""
    run = copy_run(small_run, tmp_path / "run")
    first, last = str(SMALL.spike_iteration - 3), str(SMALL.spike_iteration)
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="300")
    with silent_server() as server:
        cmd = [sys.executable, "-m", "forensics.cli", "scan", "--from", first, "--to", last]
        cmd += ["--out", "sc", "--quiet", "--engine", "ray", "--ray-address"]
        cmd += [f"{server.host}:{server.port}"]
        proc = subprocess.Popen(cmd, cwd=run, env=env, stderr=subprocess.PIPE, text=True)
        try:
            assert server.accepted.wait(BOUND_S), "the scan never connected"
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 128 + sig, err
    assert err.startswith("interrupted (") and err.count("\n") == 1, err
    assert not (run / "sc").exists()


def test_a_first_scan_that_fails_before_any_shard_leaves_no_folder(tmp_path: Path) -> None:
    from forensics.commands.scan import _first_scan_leaves_nothing

    out = tmp_path / "sc"
    with pytest.raises(KeyboardInterrupt), _first_scan_leaves_nothing(out):
        (out / ".scan" / "parts").mkdir(parents=True)
        (out / ".scan" / "run.json").write_text("{}")
        raise KeyboardInterrupt
    assert not out.exists()
    with pytest.raises(KeyboardInterrupt), _first_scan_leaves_nothing(out):
        (out / ".scan" / "parts").mkdir(parents=True)
        (out / ".scan" / "parts" / "shard-1-4.parquet").write_bytes(b"done")
        raise KeyboardInterrupt
    assert (out / ".scan" / "parts" / "shard-1-4.parquet").exists()  # resumable: kept
