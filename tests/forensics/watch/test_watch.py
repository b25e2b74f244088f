"""`forensics watch`: a fake trainer writes Megatron lines in real time, the watcher follows.

The watcher is polled by the test (in-process) so that "within 2 polls of the line that decides
it" is exact: the deciding line is found by running the batch triage (`forensics triage`'s
analysis) on every prefix of what the trainer wrote, and the poll that read that line is known.
The end-to-end tests run the real CLI in a subprocess: webhook to a local HTTP server, the
Prometheus file parsed by prometheus_client's text-format parser, kill -9 and restart.
"""

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

import forensics_testing.watch_trainer as watch_trainer
from forensics.triage.analyze import triage
from forensics.triage.config import TriageConfig
from forensics.triage.formats.megatron import megatron_raw
from forensics.watch.loop import Watcher, WatchOptions
from forensics_testing.repo_paths import REPO_ROOT
from forensics_testing.watch_trainer import RECOVERY_WINDOW, scenario
from forensics_testing.webhook_receiver import Receiver, serve_webhook

ROOT = REPO_ROOT
TRAINER = Path(watch_trainer.__file__)
CFG = TriageConfig(recovery_window=RECOVERY_WINDOW)
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _start_trainer(name: str, log: Path, pace: float = 0.004) -> subprocess.Popen[bytes]:
    log.touch()
    return subprocess.Popen([sys.executable, str(TRAINER), name, str(log), str(pace)], env=ENV)


def _follow(name: str, tmp_path: Path, **opts: object) -> tuple[Watcher, list[dict], list[int]]:
    """Run the trainer and poll a watcher every 20 ms until the trainer is done and all is read.

    Returns the watcher, its messages and, per poll, the last step it had read."""
    log = tmp_path / "train.log"
    proc = _start_trainer(name, log)
    w = Watcher(WatchOptions(log=log, out=tmp_path / "w", interval=0.02, cfg=CFG, **opts))
    msgs: list[dict] = []
    read_to: list[int] = []
    deadline = time.monotonic() + 60
    quiet = 0
    while quiet < 3 and time.monotonic() < deadline:
        msgs += w.poll()
        read_to.append(w.detector.last_step or 0)
        done = proc.poll() is not None
        still = len(read_to) > 1 and read_to[-1] == read_to[-2]
        quiet = quiet + 1 if done and still else 0
        time.sleep(0.02)
    assert proc.wait(5) == 0
    w.close()
    return w, msgs, read_to


def _table(lines: list[str]) -> pl.DataFrame:
    from forensics.triage.canonical import canonical_rows

    rows = [ln for ln in lines if ln != "ROTATE"]
    frame = pl.DataFrame({"__line": list(range(1, len(rows) + 1)), "text": rows})
    frame = frame.with_columns(pl.col("__line").cast(pl.Int64))
    raw = megatron_raw(frame, Path("x"), [])
    return canonical_rows(raw, "line", Path("x"), []).drop("__line")


def _deciding_step(table: pl.DataFrame, msg: dict) -> int:
    """The first step whose line makes the batch triage report this event with this verdict."""
    steps = table["step"].to_list()
    start = steps.index(msg["step"])
    for end in steps[start:]:
        r = triage(table.filter(pl.col("step") <= end), CFG)
        for e in r.events:
            if e["kind"] != msg["kind"] or abs(e["step"] - msg["step"]) > 5:
                continue
            if msg["kind"] != "spike" or e["verdict"] == msg["verdict"]:
                return end
    raise AssertionError(f"batch triage never reports {msg['summary']}")


def _check_timing(name: str, msgs: list[dict], read_to: list[int]) -> None:
    table = _table(scenario(name))
    for m in msgs:
        if m["message"] not in ("raised", "verdict"):
            continue
        decided = _deciding_step(table, m)
        read_at = next(i for i, s in enumerate(read_to, start=1) if s >= decided)
        assert read_at <= m["poll"] <= read_at + 1, (m["summary"], decided, read_at, m["poll"])


def _events(msgs: list[dict]) -> list[tuple]:
    return [
        (m["message"], m["kind"], m.get("verdict"))
        for m in msgs
        if m["message"] in ("raised", "verdict")
    ]


def test_benign_spike_after_grad_norm_precursor(tmp_path: Path) -> None:
    w, msgs, read_to = _follow("benign", tmp_path)
    ev = _events(msgs)
    assert ev.count(("raised", "grad_norm_alarm", None)) == 1
    spikes = [e for e in ev if e[1] == "spike"]
    assert spikes[-1][2] == "benign" and len(spikes) == len(set(spikes)) <= 2
    alarm = next(m for m in msgs if m["kind"] == "grad_norm_alarm")
    spike = next(m for m in msgs if m["kind"] == "spike")
    assert alarm["step"] < spike["step"] == 3000 and alarm["seq"] < spike["seq"]
    _check_timing("benign", msgs, read_to)
    on_disk = [json.loads(x) for x in (tmp_path / "w" / "events.jsonl").read_text().splitlines()]
    assert [m["seq"] for m in on_disk] == list(range(1, len(on_disk) + 1))
    assert [m["summary"] for m in on_disk] == [m["summary"] for m in msgs]


def test_malignant_spike_undecided_then_malignant(tmp_path: Path) -> None:
    w, msgs, read_to = _follow("malignant", tmp_path)
    spikes = [m for m in msgs if m["kind"] == "spike"]
    assert [(m["message"], m["verdict"]) for m in spikes] == [
        ("raised", "undecided"),
        ("verdict", "malignant"),
    ]
    assert spikes[1]["at_step"] >= 3000 + RECOVERY_WINDOW
    assert "roll back to" in spikes[1]["summary"] and spikes[1]["event"]["next_command"]
    _check_timing("malignant", msgs, read_to)


def test_nan_divergence_raised_once(tmp_path: Path) -> None:
    w, msgs, read_to = _follow("nan", tmp_path)
    divs = [m for m in msgs if m["kind"] == "divergence"]
    assert len(divs) == 1 and divs[0]["step"] == 2801
    assert "went non-finite at step 2801" in divs[0]["summary"]
    _check_timing("nan", msgs, read_to)


def test_restart_repeating_iterations_raises_nothing_twice(tmp_path: Path) -> None:
    w, msgs, _ = _follow("restart", tmp_path)
    ev = _events(msgs)
    assert len(ev) == len(set(ev)) and ("raised", "grad_norm_alarm", None) in ev
    assert ev[-1] == ("verdict", "spike", "benign") or ("raised", "spike", "benign") in ev
    assert w.detector.restarts >= 1 and w.detector.table["step"].is_sorted()
    assert w.detector.table["step"].n_unique() == w.detector.table.height


def test_rotation_loses_no_line(tmp_path: Path) -> None:
    w, msgs, _ = _follow("rotation", tmp_path)
    assert (tmp_path / "train.log.1").exists()
    steps = w.detector.table["step"].to_list()
    assert steps == list(range(watch_trainer.FIRST, 3201))  # every line, across both files
    assert any(m["kind"] == "log_note" and "rotated" in m["summary"] for m in msgs)
    assert _events(msgs).count(("raised", "grad_norm_alarm", None)) == 1


def test_truncation_and_a_log_that_stops_growing(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    lines = scenario("benign")
    log.write_text("\n".join(lines[:300]) + "\n" + lines[300][:30])  # a partial last line
    w = Watcher(WatchOptions(log=log, out=tmp_path / "w", interval=0.01, cfg=CFG, stall_after=0.2))
    w.poll()
    assert w.detector.last_step == watch_trainer.FIRST + 299
    with open(log, "a") as fh:
        fh.write(lines[300][30:] + "\n")
    w.poll()
    assert w.detector.last_step == watch_trainer.FIRST + 300
    time.sleep(0.25)
    stalled = [m for m in w.poll() + w.poll() if m["kind"] == "log_stalled"]
    assert len(stalled) == 1 and "has not grown" in stalled[0]["summary"]
    log.write_text("\n".join(lines[:10]) + "\n")  # truncated and rewritten (a job restarted)
    new = w.poll()
    assert any(m["kind"] == "log_note" and "truncated" in m["summary"] for m in new)
    assert any(m["kind"] == "log_resumed" for m in new)
    w.close()


def test_watcher_resumes_from_its_directory_without_repeats(tmp_path: Path) -> None:
    # Kill (here: drop) the watcher after every poll and start a new one on the same directory.
    log = tmp_path / "train.log"
    lines = scenario("malignant")
    log.touch()
    out = tmp_path / "w"
    for i in range(0, len(lines), 60):
        with open(log, "a") as fh:
            fh.write("\n".join(lines[i : i + 60]) + "\n")
        w = Watcher(WatchOptions(log=log, out=out, interval=0.01, cfg=CFG))
        w.poll()
        w.close()
    got = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    once = tmp_path / "once"
    w = Watcher(WatchOptions(log=log, out=once, interval=0.01, cfg=CFG))
    w.poll()
    w.close()
    ref = [json.loads(x) for x in (once / "events.jsonl").read_text().splitlines()]
    assert _events(got) == [("raised", "spike", "undecided"), ("verdict", "spike", "malignant")]
    assert [m["seq"] for m in got] == list(range(1, len(got) + 1))
    # read in one go, the same log gives the same final verdict on the same spike
    assert _events(ref) == [("raised", "spike", "malignant")]
    assert ref[0]["step"] == got[0]["step"] == 3000


# --------------------------------------------------------------------------- CLI end to end


@pytest.fixture
def receiver():
    with serve_webhook() as url:
        yield url


def _watch_cli(log: Path, out: Path, *extra: str) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "forensics.cli", "watch", str(log), "--out", str(out)]
    cmd += ["--interval", "0.05", "--recovery-window", str(RECOVERY_WINDOW), *extra]
    return subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait_for(pred, timeout: float = 60.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_cli_killed_and_restarted_webhook_and_prometheus(tmp_path: Path, receiver: str) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    log = tmp_path / "train.log"
    out, prom = tmp_path / "w", tmp_path / "metrics" / "forensics.prom"
    trainer = _start_trainer("malignant", log, pace=0.01)
    args = ("--webhook", receiver, "--prometheus", str(prom), "--on-malignant", "none")
    w1 = _watch_cli(log, out, *args)
    _wait_for(lambda: any(m["kind"] == "spike" for m in _jsonl(out / "events.jsonl")))
    w1.send_signal(signal.SIGKILL)  # mid-run, no cleanup
    w1.wait(10)
    w2 = _watch_cli(log, out, *args)
    assert trainer.wait(60) == 0
    _wait_for(lambda: any(m.get("verdict") == "malignant" for m in _jsonl(out / "events.jsonl")))
    time.sleep(0.3)
    w2.send_signal(signal.SIGTERM)
    assert w2.wait(20) == 0, w2.stderr.read().decode()
    got = _jsonl(out / "events.jsonl")
    ev = _events(got)
    assert ev == [("raised", "spike", "undecided"), ("verdict", "spike", "malignant")]
    assert [m["seq"] for m in got] == list(range(1, len(got) + 1))
    # every message reached the webhook once, in order, despite the failed first POST
    assert [b["seq"] for b in Receiver.bodies] == [m["seq"] for m in got]
    families = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    assert families["forensics_watch_last_step"].samples[0].value == 3350
    assert families["forensics_grad_norm_ema_ratio"].samples[0].value > 0
    assert families["forensics_malignant_spikes"].samples[0].value == 1
    assert not list(prom.parent.glob(".*.tmp"))


def test_cli_refuses_bad_setups_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "train.log"
    log.write_text("\n".join(scenario("benign")[:50]) + "\n")
    other = tmp_path / "other.log"
    other.write_text(log.read_text())
    out = tmp_path / "w"
    w = Watcher(WatchOptions(log=log, out=out, interval=0.01, cfg=CFG))
    w.poll()
    w.close()
    state = tmp_path / "trainer_state.json"
    state.write_text('{"log_history": [{"step": 1, "loss": 2.0}]}')
    cases = [
        ([str(other), "--out", str(out)], "watches"),
        ([str(state), "--out", str(tmp_path / "t")], "not a log that grows as it trains"),
        ([str(log), "--webhook", "ftp://x"], "not an http(s) URL"),
        ([str(log), "--on-malignant", "spike"], "needs --config"),
    ]
    from forensics.cli import main

    for args, message in cases:  # the CLI's own entry point, in-process (one line on stderr)
        monkeypatch.setattr(sys, "argv", ["forensics", "watch", *args, "--max-polls", "2"])
        monkeypatch.setenv("COLUMNS", "300")
        with pytest.raises(SystemExit) as exit_:
            main()
        lines = capsys.readouterr().err.strip().splitlines()
        assert exit_.value.code == 2 and len(lines) == 1 and message in lines[0], lines


def test_terminal_shows_names_as_written() -> None:
    from rich.console import Console

    from forensics.watch.terminal import message_text

    console = Console(record=True, width=200)
    console.print(message_text({"seq": 1, "kind": "spike", "summary": "loss/[bold]x[/] :book:"}))
    assert "loss/[bold]x[/] :book:" in console.export_text()


def test_malignant_verdict_runs_forensics_spike_and_posts_the_culprit(tmp_path: Path) -> None:
    # The demo's generated run (real Megatron data, a dirty crawl batch from iteration 330, a
    # simulated log): the watcher sees the spike turn malignant and runs `forensics spike`.
    from forensics_testing.demo.build import TINY, build_run

    run = tmp_path / "run"
    truth = build_run(run, TINY, progress=False)
    lines = (run / "logs" / "train.log").read_text().splitlines()
    log = tmp_path / "live.log"
    out = tmp_path / "w"
    log.write_text("\n".join(lines[:300]) + "\n")
    w = Watcher(
        WatchOptions(
            log=log,
            out=out,
            interval=0.02,
            cfg=TriageConfig(recovery_window=20),
            config=str(run / "forensics.yaml"),
            spike_args=("--embed-cap", "0"),
        )
    )
    msgs = w.poll()
    with open(log, "a") as fh:
        for ln in lines[300:]:
            fh.write(ln + "\n")
            fh.flush()
            msgs += w.poll()
    assert any(m["message"] == "forensics_started" for m in msgs)
    w.close()  # the watcher goes away while the spike run works; a new one picks it up
    opts = w.opts
    w = Watcher(opts)
    # attached to the running process (not restarted), or it had already finished and reported
    attached = 330 in w.jobs and w.jobs[330].proc is None
    assert attached or w.book.has("forensics", step=330)
    msgs += w.book.messages[len(msgs) :]
    deadline = time.monotonic() + 120
    while not any(m["message"] == "forensics" for m in msgs) and time.monotonic() < deadline:
        time.sleep(0.1)
        msgs += w.poll()
    w.close()
    assert _jsonl(out / "events.jsonl") == msgs  # nothing repeated, nothing lost
    kinds = [(m["message"], m["kind"], m.get("verdict")) for m in msgs]
    assert ("verdict", "spike", "malignant") in kinds
    started = next(m for m in msgs if m["message"] == "forensics_started")
    (done,) = [m for m in msgs if m["message"] == "forensics"]
    assert done["ok"], done["summary"]
    assert started["step"] == done["step"] == 330
    assert done["culprit_cluster"] == f"crawl_batch={truth['dirty_crawl_batch']}"
    assert done["rollback_iteration"] in (100, 200, 300) and done["rollback_iteration"] < 330
    assert done["paste"].startswith(
        f"--ckpt-step {done['rollback_iteration']} --iterations-to-skip "
    )
    # The message names what to do, as the report's ACTION line does, and the file to use.
    assert done["action"] in ("rebuild", "skip") and "ACTION " in done["summary"]
    assert f"checkpoint iteration {done['rollback_iteration']}" in done["summary"]
    assert done["flags_file"] == str(out / "spike-330" / "restart-megatron-lm.flags")
    assert done["flags_file"] in done["summary"]
    assert (out / "spike-330" / "skip.json").exists()


def test_live_view_renders_and_watch_starts_without_torch(tmp_path: Path) -> None:
    from rich.console import Console

    from forensics.watch.terminal import Terminal

    console = Console(record=True, width=120, force_terminal=True)
    term = Terminal(console, "runs/[red]x[/].log", live=True)
    msg = {"seq": 1, "kind": "spike", "verdict": "undecided", "summary": "spike on loss: [b]u"}
    term.show([msg], {"step": 5})
    term.close()
    text = console.export_text()
    assert "runs/[red]x[/].log" in text and "#1 spike on loss: [b]u" in text
    log = tmp_path / "m.jsonl"
    log.write_text('{"step": 1, "loss": 3.0}\n{"step": 2, "loss": 2.9}\n{"step": 3, "lo\n')
    code = (
        "import sys\nfrom forensics.cli import app\n"
        f"try:\n    app(['watch', {str(log)!r}, '--max-polls', '1', '--interval', '0.01'])\n"
        "except SystemExit as e:\n    assert not e.code, e.code\n"
        "assert 'torch' not in sys.modules\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    msgs = _jsonl(tmp_path / "m.jsonl.watch" / "events.jsonl")
    (note,) = [m for m in msgs if m["kind"] == "log_note"]
    assert "1 unreadable lines skipped: line 3: not valid JSON" in note["summary"]


def test_one_watcher_per_directory_and_foreign_prometheus_file(tmp_path: Path) -> None:
    from forensics.errors import ForensicsError

    log = tmp_path / "train.log"
    log.write_text("\n".join(scenario("benign")[:20]) + "\n")
    first = Watcher(WatchOptions(log=log, out=tmp_path / "w", cfg=CFG))
    with pytest.raises(ForensicsError, match="another forensics watch is writing there"):
        Watcher(WatchOptions(log=log, out=tmp_path / "w", cfg=CFG))
    first.close()
    mine = tmp_path / "node.prom"
    mine.write_text("node_load1 0.5\n")
    with pytest.raises(ForensicsError, match="not a forensics textfile"):
        Watcher(WatchOptions(log=log, out=tmp_path / "w", cfg=CFG, prometheus=mine))
    assert mine.read_text() == "node_load1 0.5\n"


def test_sliding_window_finds_what_the_batch_triage_finds(tmp_path: Path) -> None:
    # A window of 400 steps over a 4,000-step log with five benign spikes and one malignant:
    # each is raised once, with the verdict the batch triage gives on the whole log.
    import numpy as np

    from forensics.watch.detect import window_steps
    from forensics_testing import loss_curves

    cfg = TriageConfig(
        recovery_window=50, plateau_steps=100, loss_scale_window=100, grad_baseline_rows=100
    )
    assert window_steps(cfg) == 300
    df = loss_curves.healthy(4000, seed=3)
    s = df["step"].to_numpy()
    bump = np.zeros(len(s))
    for at in (700, 1300, 1900, 2500, 3100):
        bump += np.where(s >= at, 1.5 * np.exp(-np.clip(s - at, 0, None) / 4.0), 0.0)
    bump += np.where(s >= 3600, 0.5, 0.0)  # a lasting step up: malignant after 50 steps
    df = df.with_columns(pl.Series("loss", df["loss"].to_numpy() + bump))
    lines = loss_curves.megatron_lines(df)
    log = tmp_path / "train.log"
    log.touch()
    w = Watcher(WatchOptions(log=log, out=tmp_path / "w", cfg=cfg))
    msgs = []
    for i in range(0, len(lines), 25):
        with open(log, "a") as fh:
            fh.write("\n".join(lines[i : i + 25]) + "\n")
        msgs += w.poll()
    w.close()
    assert w.detector.trimmed_before is not None and w.detector.table.height <= 301
    final: dict[int, str] = {}
    for m in msgs:
        if m["kind"] == "spike":
            final[m["step"]] = m["verdict"]
    batch = {
        e["step"]: e["verdict"] for e in triage(_table(lines), cfg).events if e["kind"] == "spike"
    }
    assert final == batch
    assert sorted(final) == [700, 1300, 1900, 2500, 3100, 3600]
    assert final[3600] == "malignant" and set(list(final.values())[:5]) == {"benign"}
    keys = [(m["message"], m["step"], m["verdict"]) for m in msgs if m["kind"] == "spike"]
    assert len(keys) == len(set(keys)) == 12  # raised undecided, then the verdict, once each
    # The run-level finding is counted over every spike the watcher judged, not the window's:
    # the same finding as the batch triage's, raised once, as soon as the rate is passed.
    (batch_rec,) = [e for e in triage(_table(lines), cfg).events if e["kind"] == "recurring_spikes"]
    (rec,) = [m for m in msgs if m["kind"] == "recurring_spikes"]
    assert rec["step"] == batch_rec["step"] == 700 and batch_rec["count"] == 5
    assert cfg.recur_min_count <= rec["event"]["count"] <= batch_rec["count"]
    assert rec["event"]["action"] == batch_rec["action"]


def test_tensorboard_run_directory_followed_record_by_record(tmp_path: Path) -> None:
    # Written by tensorboard's own RecordWriter, a record at a time, one record left half-written
    # across a poll, then a restarted job's second event file repeating iterations.
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    from forensics_testing import loss_curves

    df = loss_curves.make("benign_spike", n=3200).filter(pl.col("step") >= 2500)
    run = tmp_path / "tb"
    run.mkdir()

    def records(rows: pl.DataFrame) -> list[bytes]:
        out = []
        for step, loss, grad in rows.select("step", "loss", "grad_norm").iter_rows():
            vals = [
                summary_pb2.Summary.Value(tag="lm loss", simple_value=loss),
                summary_pb2.Summary.Value(tag="grad-norm", simple_value=grad),
            ]
            ev = event_pb2.Event(step=step, summary=summary_pb2.Summary(value=vals))
            out.append(ev.SerializeToString())
        return out

    w = Watcher(WatchOptions(log=run, out=tmp_path / "w", cfg=CFG))
    msgs: list[dict] = []
    first = run / "events.out.tfevents.1.host"
    with open(first, "wb") as fh:
        writer = RecordWriter(fh)
        for i, rec in enumerate(records(df.filter(pl.col("step") <= 3100))):
            if i == 300:  # half a record on disk at poll time
                buf = io.BytesIO()
                RecordWriter(buf).write(rec)
                data = buf.getvalue()
                fh.write(data[:9])
                fh.flush()
                msgs += w.poll()
                fh.write(data[9:])
            else:
                writer.write(rec)
            fh.flush()
            if i % 20 == 0:
                msgs += w.poll()
    msgs += w.poll()
    with open(run / "events.out.tfevents.2.host", "wb") as fh:  # restarted from 3000
        writer = RecordWriter(fh)
        for rec in records(df.filter(pl.col("step") > 3000)):
            writer.write(rec)
    msgs += w.poll() + w.poll()
    w.close()
    assert w.fmt == "tensorboard"
    assert w.detector.table["step"].to_list() == list(range(2500, 3201))
    ev = _events(msgs)
    assert ev.count(("raised", "grad_norm_alarm", None)) == 1 and len(ev) == len(set(ev))
    assert ("verdict", "spike", "benign") in ev or ("raised", "spike", "benign") in ev
    assert not any(m["kind"] == "log_note" and "unreadable" in m["summary"] for m in msgs)
