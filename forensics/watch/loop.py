"""`Watcher`: one poll = read the new lines, update the window, re-judge, emit what is new.

Order within a poll, chosen so a watcher killed at any point neither loses nor repeats a
message: (1) new messages are appended to events.jsonl (durable), then handed to the webhook and
the terminal; (2) the window of rows is saved, then the follower's position (state.json). A
restart after (1) but before (2) re-reads lines it had read, re-judges them and finds its
messages already in events.jsonl; a restart before (1) re-reads the same lines and raises them.
"""

from __future__ import annotations

import fcntl
import json
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from dataloaders.atomic import write_json_atomic, write_parquet_atomic
from dataloaders.regular_files import check_input_path
from forensics.errors import ForensicsError
from forensics.triage.analyze import TriageResult
from forensics.triage.config import RunInfo, TriageConfig
from forensics.triage.formats import get_format
from forensics.triage.runlevel import run_recurrence
from forensics.watch.book import EventBook
from forensics.watch.detect import WindowDetector
from forensics.watch.follow import LogFollower, Position
from forensics.watch.messages import event_message, stall_message
from forensics.watch.parse import ChunkParser, detect_line_format
from forensics.watch.planning import MAX_ANALYSES, PlanRunner  # noqa: F401 - re-exported
from forensics.watch.plans import PLAN_KINDS, PlanState, restore
from forensics.watch.sinks import (
    WEBHOOK_STATE,
    WebhookSender,
    watch_metrics,
    write_prometheus,
)
from forensics.watch.spikejob import SpikeJob
from forensics.watch.tbfollow import TBPosition, TensorBoardFollower, TensorBoardParser

STATE_FILE = "state.json"
RUN_LEVEL = ("recurring_spikes",)  # findings over the whole run, not the window
WINDOW_FILE = "window.parquet"
LOCK_FILE = ".watch.lock"
_UNDETECTED_LIMIT = 4 << 20  # detect_format reads this much: past it, "cannot tell" is final


@dataclass
class WatchOptions:
    log: Path
    out: Path
    fmt: str = "auto"
    interval: float = 5.0
    webhook: str | None = None
    prometheus: Path | None = None
    config: str | None = None
    from_checkpoint: str | None = None  # the trainer's save folder, read when a spike is raised
    on_malignant: str = "spike"
    stall_after: float = 600.0
    cfg: TriageConfig = field(default_factory=TriageConfig)
    run: RunInfo = field(default_factory=RunInfo)
    webhook_backoff_s: float = 0.5
    webhook_format: str = "json"
    spike_args: tuple[str, ...] = ()


class Watcher(PlanRunner):
    """Follows one log into one watch directory (see the module docstring)."""

    def __init__(self, opts: WatchOptions, terminal: Any | None = None) -> None:
        self.opts = opts
        self.out = opts.out
        if self.out.exists() and not self.out.is_dir():
            raise ForensicsError(f"--out {self.out}: exists and is not a directory")
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            self._lock = open(self.out / LOCK_FILE, "w")  # noqa: SIM115 - held while watching
        except OSError as err:
            raise ForensicsError(f"--out {self.out}: cannot write there ({err.strerror})") from None
        prom = opts.prometheus
        if prom is not None and prom.exists():
            head = prom.read_text(errors="replace")[:64] if prom.is_file() else ""
            if not head.startswith("# HELP forensics_"):
                raise ForensicsError(
                    f"--prometheus {prom}: exists and is not a forensics textfile; choose another"
                )
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise ForensicsError(
                f"--out {self.out}: another forensics watch is writing there"
            ) from None
        try:
            state = self._load_state()
            self.book = EventBook(self.out)
        except BaseException:
            self._lock.close()  # releases the lock: a refused start leaves nothing held
            raise
        self.detector = WindowDetector(opts.cfg, opts.run, opts.log)
        window = self.out / WINDOW_FILE
        if state and window.exists():
            self.detector.table = pl.read_parquet(window)
            self.detector.trimmed_before = state.get("trimmed_before")
            self.detector.first_step = state.get("first_step")
        self.fmt: str | None = state.get("format") if state else None
        self.follower: LogFollower | TensorBoardFollower | None = None
        self.parser: ChunkParser | TensorBoardParser | None = None
        if state and self.fmt:
            self._make_reader(self.fmt, state.get("position"), state.get("header"))
        self.last_growth = time.time()
        self.stalled = bool(state.get("stalled")) if state else False
        # Messages the webhook never took, this watcher's and earlier ones' (state.json); those
        # an earlier watcher stopped before sending are posted again now, so not kept.
        earlier = state.get("undelivered", []) if state else []
        self.undelivered: list[dict[str, Any]] = [e for e in earlier if not e.get("retried")]
        self.reported_before = {e.get("seq") for e in self.undelivered}
        self._signalled = False
        self._told_undetected = False  # said once: the log holds no line of a known format yet
        self.polls = 0
        self.terminal = terminal
        self.jobs: dict[int, SpikeJob] = {}
        self.webhook = (
            WebhookSender(
                opts.webhook,
                self.out,
                backoff_s=opts.webhook_backoff_s,
                fmt=opts.webhook_format,
                log=str(opts.log),
            )
            if opts.webhook
            else None
        )
        self.view: dict[str, Any] = {}
        self._stop = False
        if self.webhook:  # what the previous watcher had not handed over
            for msg in self.book.messages:
                self.webhook.post(msg)
        self.plans: dict[int, PlanState] = restore(self.book.messages, self._key_of)
        self._resume_jobs()

    # ------------------------------------------------------------------ state

    def _load_state(self) -> dict[str, Any] | None:
        path = self.out / STATE_FILE
        if not path.exists():
            ours = (LOCK_FILE, "events.jsonl", WINDOW_FILE, WEBHOOK_STATE)
            stray = [
                p.name
                for p in self.out.iterdir()
                if p.name not in ours and not p.name.startswith((".", "spike-"))
            ]
            if stray:
                raise ForensicsError(
                    f"--out {self.out}: holds files that are not a watch's ({', '.join(stray[:3])})"
                    "; choose an empty or new directory"
                )
            return None
        try:
            state = json.loads(path.read_text())
        except json.JSONDecodeError:
            raise ForensicsError(f"{path}: not valid JSON; move the directory away") from None
        if state.get("log") != str(self.opts.log.resolve()):
            raise ForensicsError(
                f"--out {self.out}: watches {state.get('log')}, not {self.opts.log}; use another "
                "--out"
            )
        return state

    def _save_state(self) -> None:
        if self.detector.table is not None:
            write_parquet_atomic(self.detector.table, self.out / WINDOW_FILE)
        write_json_atomic(
            self.out / STATE_FILE,
            {
                "version": 1,
                "log": str(self.opts.log.resolve()),
                "format": self.fmt,
                "header": self.parser.header if self.parser else None,
                "position": self.follower.pos.to_dict() if self.follower else None,
                "trimmed_before": self.detector.trimmed_before,
                "first_step": self.detector.first_step,
                "stalled": self.stalled,
                "undelivered": self.undelivered,
            },
        )

    # ------------------------------------------------------------------ one poll

    def _make_reader(self, fmt: str, pos: dict[str, Any] | None, header: str | None) -> None:
        log = self.opts.log
        if get_format(fmt).follows_events:
            self.follower = TensorBoardFollower(log, TBPosition.from_dict(pos) if pos else None)
            self.parser = TensorBoardParser(log)
        else:
            self.follower = LogFollower(log, Position.from_dict(pos) if pos else None)
            self.parser = ChunkParser(log, fmt, header)

    def _ensure_parser(self) -> bool:
        if self.parser is not None:
            return True
        log = self.opts.log
        check_input_path(log)  # a FIFO or device put there later: refused, never opened
        if not log.exists() or (log.is_file() and log.stat().st_size == 0):
            return False
        fmt = detect_line_format(log, self.opts.fmt)
        if fmt is None:
            if log.is_file() and log.stat().st_size > _UNDETECTED_LIMIT:
                raise ForensicsError(
                    f"{log}: cannot tell the log format from its first 4 MB; pass --format"
                )
            return False  # only the preamble so far: look again next poll
        self.fmt = fmt
        self._make_reader(fmt, None, None)
        return True

    def _undetected_note(self) -> list[dict[str, Any]]:
        """A log that exists and holds bytes but no line of a known format (binary data, a
        preamble so far): said once, so a watcher that sees nothing never says nothing."""
        log = self.opts.log
        if self._told_undetected or not log.is_file() or log.stat().st_size == 0:
            return []
        self._told_undetected = True
        summary = (
            f"{log}: no line of a known log format in its {log.stat().st_size:,} bytes yet; "
            "watching for one (pass --format to name the format)"
        )
        return [self._emit({"message": "note", "kind": "log_note", "summary": summary})]

    def poll(self) -> list[dict[str, Any]]:
        """Read what is new, judge it, emit and persist; returns the messages raised."""
        self.polls += 1
        new: list[dict[str, Any]] = []
        now = time.time()
        batches: list[list[tuple[int, Any]]] = []
        if not self._ensure_parser():
            new += self._undetected_note()
        elif self.follower is not None:
            batches = self.follower.poll()
            for note in self.follower.notes:
                new.append(self._emit({"message": "note", "kind": "log_note", "summary": note}))
            self.follower.notes.clear()
        if batches:
            self.last_growth = now
            if self.stalled:
                self.stalled = False
                new.append(
                    self._emit(
                        stall_message("log_resumed", self.detector.last_step, self.last_growth)
                    )
                )
            assert self.parser is not None
            added = False
            for batch in batches:
                rows = self.parser.parse(batch)
                if rows is not None and rows.height:
                    self.detector.add(rows)
                    added = True
            if added:
                new += self._judge()
            for note in self.parser.notes + self.detector.notes:
                if not self.book.has("note", summary=note):  # a re-read after a restart
                    new.append(self._emit({"message": "note", "kind": "log_note", "summary": note}))
            self.parser.notes.clear()
            self.detector.notes.clear()
        elif not self.stalled and now - self.last_growth >= self.opts.stall_after:
            self.stalled = True
            new.append(
                self._emit(stall_message("log_stalled", self.detector.last_step, self.last_growth))
            )
        new += self._check_jobs()
        failed = self._take_undelivered(self.webhook.new_failures() if self.webhook else [])
        if batches or new or failed:
            self._save_state()
        self._update_view()
        if self.opts.prometheus is not None:
            write_prometheus(self.opts.prometheus, self._prometheus())
        if self.terminal is not None:
            self.terminal.show(new, self.view)
        return new

    def _take_undelivered(self, entries: list[dict[str, Any]]) -> bool:
        """Say on the terminal which messages the webhook did not take, and keep them for the
        state file and the exit status (`watch_command`)."""
        for entry in entries:
            self.undelivered.append(entry)
            if self.terminal is not None:
                self.terminal.warn(
                    f"webhook {self.opts.webhook}: message #{entry['seq']} ({entry['kind']}) "
                    f"not delivered: {entry['error']}"
                )
        return bool(entries)

    # ------------------------------------------------------------------ judging

    def _judge(self) -> list[dict[str, Any]]:
        result = self.detector.analyse()
        if result is None:
            return []
        cfg = self.opts.cfg
        zone = self.detector.zone_start()
        near = int(5 * self.detector.interval())
        out: list[dict[str, Any]] = []
        for ev in result.events:
            kind, curve, step = ev["kind"], ev.get("curve"), int(ev["step"])
            if kind in RUN_LEVEL:
                continue  # judged on the whole run below, not on the window
            end = int(ev.get("peak_step") or ev.get("end_step") or step)
            tol = (
                near
                if kind in ("spike", "grad_norm_alarm", "loss_scale_collapse")
                else (cfg.recovery_window)
            )
            known = self.book.find(kind, curve, step, end, tol)
            if known is None:
                if zone is not None and step < zone:
                    continue  # judged while its history was in view
                if kind == "plateau" and any(
                    k.kind == "plateau" and k.curve == curve and step - k.step < cfg.plateau_steps
                    for k in self.book.known
                ):
                    continue  # plateau warnings at a low rate
                out.append(self._emit(self._event_msg("raised", ev)))
                key = step
            elif (
                kind == "spike"
                and ev["verdict"] != "undecided"
                and (ev["verdict"] not in known.verdicts)
                # Malignant is final (its window had passed): a trimmed window that no longer
                # holds the spike's history does not take it back.
                and "malignant" not in known.verdicts
            ):
                out.append(self._emit(self._event_msg("verdict", ev)))
                key = known.step
            else:
                known.end_step = max(known.end_step, end)
                continue
            if kind in PLAN_KINDS:
                out += self._advance_plan(key, ev)
        out += self._run_level(result)
        self.view["open_spikes"] = sum(
            1 for e in result.events if e["kind"] == "spike" and e["verdict"] == "undecided"
        )
        self.view["malignant"] = sum(1 for e in result.events if e.get("verdict") == "malignant")
        self.view["divergence"] = int(any(e["kind"] == "divergence" for e in result.events))
        last = self.detector.last_step or 0
        self.view["alarm_active"] = int(
            any(a.end_step >= last for a in result.alarms if a.end_step is not None)
        )
        main = result.curves.get("loss") or next(iter(result.curves.values()), None)
        if main is not None and len(main.ema):
            self.view["loss_ema"] = float(main.ema[-1])
        return out

    def _run_level(self, result: TriageResult) -> list[dict[str, Any]]:
        """Recurring benign spikes, counted over every spike this watcher judged benign (the
        window holds only the last few): raised once, as `forensics triage` finds it."""
        if self.book.has("raised", kind="recurring_spikes") or self.detector.table is None:
            return []
        benign = sorted(
            k.step
            for k in self.book.known
            if k.kind == "spike" and k.curve == "loss" and "benign" in k.verdicts
        )
        main = result.curves.get("loss")
        if main is None:
            return []
        ev = run_recurrence(
            benign,
            main.steps,
            self.detector.table,
            self.opts.cfg,
            self.opts.run,
            first=self.detector.first_step,
        )
        return [] if ev is None else [self._emit(self._event_msg("raised", ev))]

    def _event_msg(self, message: str, ev: dict[str, Any]) -> dict[str, Any]:
        at_line = self.follower.pos.line_no if self.follower else None
        return event_message(message, ev, self.detector.last_step, at_line, self.polls)

    def _emit(self, msg: dict[str, Any]) -> dict[str, Any]:
        written = self.book.append(msg)
        if self.webhook is not None:
            self.webhook.post(written)
        return written

    # ------------------------------------------------------------------ views

    def _update_view(self) -> None:
        latest = self.detector.latest()
        self.view.update(latest)
        if self.parser is None:
            self.view["status"] = "waiting for the log (missing, empty or only a preamble)"
        else:
            self.view["status"] = "stalled" if self.stalled else "growing"
        ratio = self.detector.grad_ratio()
        if ratio is not None:
            self.view["grad_ratio"] = ratio

    def _prometheus(self) -> str:
        return watch_metrics(
            str(self.opts.log), self.view, self.book.messages, self.stalled, self.last_growth
        )

    # ------------------------------------------------------------------ the loop

    def run(self, max_polls: int | None = None) -> None:
        """Poll every `interval` seconds until SIGINT/SIGTERM (or `max_polls`)."""

        def stop(signum: int, frame: object) -> None:
            self._stop = self._signalled = True

        old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            while not self._stop and (max_polls is None or self.polls < max_polls):
                start = time.monotonic()
                self.poll()
                left = self.opts.interval - (time.monotonic() - start)
                if left > 0 and not self._stop:
                    self.wait(left)
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            self.close()

    def wait(self, seconds: float) -> None:
        """Sleep until the next poll, or until a background analysis ends: its plan is then
        posted at once, not up to a poll interval later."""
        end = time.monotonic() + seconds
        while not self._stop and time.monotonic() < end:
            if any(job.returncode()[0] for job in self.jobs.values()):
                return
            time.sleep(min(0.2, max(0.0, end - time.monotonic())))

    def close(self) -> None:
        """Hand the webhook what is queued (for half a second after SIGINT/SIGTERM, else one
        try's timeout) and report what it did not take; release the rest."""
        if self.webhook is not None:
            wait = 0.5 if self._signalled else self.webhook.timeout_s + 1.0
            if self._take_undelivered(self.webhook.close(wait)):
                self._save_state()
        for part in (self.terminal, self.follower):
            if part is not None:
                part.close()
        self._lock.close()
