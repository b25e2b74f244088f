"""Where the watcher's messages go besides events.jsonl: a webhook, a Prometheus textfile, the
terminal.

The webhook is posted from its own thread through a queue, so a slow or dead receiver never
delays reading the log; each message is retried with exponential backoff, every try bounded by a
timeout (a receiver that accepts and never answers costs `timeout_s`, not forever). Once a
message is given up the receiver is taken as down and the next ones get one try each until one
gets through, so a dead receiver does not hold a queue of alerts for minutes. Every message given
up is kept in `failures` (its number, kind, summary and the last error), and what is still queued
when the watcher stops is listed by `close`: the watcher reports both (forensics.watch.loop).
What was handed over is recorded in `webhook.json` (the last sequence number delivered or given
up on), so a restarted watcher posts what the previous one had not, and nothing twice unless it
was killed mid-POST.

The Prometheus file follows the text exposition format (HELP/TYPE lines, label values escaped)
and is replaced atomically, as node_exporter's textfile collector requires.
"""

from __future__ import annotations

import json
import math
import queue
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from dataloaders.atomic import write_json_atomic, write_text_atomic

WEBHOOK_STATE = "webhook.json"
WEBHOOK_FORMATS = ("json", "slack")
_CRITICAL = {"malignant", "divergence", "confirmed"}
_WARNING = {
    "undecided",
    "provisional",
    "grad_norm_alarm",
    "loss_scale_collapse",
    "plateau",
    "recurring_spikes",
    "slow_climb",
}
# Fields of the triage event a receiver acts on, lifted to the top of a plain JSON event.
_LIFTED = ("rollback_iteration", "rollback_rule", "next_command", "peak_step", "action")


def severity(msg: dict[str, Any]) -> str:
    """critical (act: malignant, divergence, a confirmed plan), warning (watch), or info."""
    keys = {msg.get("verdict"), msg.get("kind"), msg.get("status")}
    if msg.get("message") == "plan" and msg.get("status") == "cleared":
        return "info"
    if msg.get("message") == "forensics" and msg.get("ok") is False:
        return "warning"
    if keys & _CRITICAL or str(msg.get("action") or "").startswith("STOP NOW"):
        return "critical"  # a divergence's plan is an emergency, provisional or not
    if keys & _WARNING or msg.get("kind") == "log_stalled":
        return "warning"
    return "info"


def json_event(msg: dict[str, Any], log: str) -> dict[str, Any]:
    """A plain JSON event: the message's own fields, flat (the triage event's nested evidence
    left out, the fields a receiver acts on lifted), with `source`, `log` and `severity`."""
    body = {k: v for k, v in msg.items() if k != "event"}
    ev = msg.get("event") or {}
    for key in _LIFTED:
        if key in ev and key not in body:
            body[key] = ev[key]
    if (ev.get("decide") or {}).get("back_by_step") is not None:
        body.setdefault("decide_by_step", ev["decide"]["back_by_step"])
    return {"source": "forensics watch", "log": log, "severity": severity(msg), **body}


def _mrkdwn(text: str) -> str:
    """Slack's three control characters escaped (api.slack.com/reference/surfaces/formatting)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_body(msg: dict[str, Any], log: str) -> dict[str, Any]:
    """Slack's incoming-webhook payload: {"text": ...} in mrkdwn, the headline bold with its
    severity, the summary, and the command to run in a code block."""
    level = severity(msg)
    icon = {"critical": ":rotating_light:", "warning": ":warning:"}.get(
        level, ":information_source:"
    )
    what = msg.get("kind", "")
    if msg.get("status"):
        what = f"plan {msg['status']}"
    elif msg.get("verdict"):
        what = f"{msg.get('kind')} {msg['verdict']}"
    where = f" at step {msg['step']}" if msg.get("step") is not None else ""
    lines = [
        f"{icon} *forensics watch: {_mrkdwn(str(what).replace('_', ' '))}{where}* "
        f"(`{_mrkdwn(log)}`, #{msg.get('seq', '?')})",
        _mrkdwn(str(msg.get("summary", ""))),
    ]
    command = msg.get("next_command") or (msg.get("event") or {}).get("next_command")
    if level != "info" and command:
        lines.append(f"```{_mrkdwn(str(command))}```")
    return {"text": "\n".join(lines)}


def webhook_body(msg: dict[str, Any], fmt: str, log: str) -> dict[str, Any]:
    """The body POSTed for one message in the chosen --webhook-format."""
    return slack_body(msg, log) if fmt == "slack" else json_event(msg, log)


def undelivered_entry(msg: dict[str, Any], error: str, retried: bool = False) -> dict[str, Any]:
    """What the watcher says about a message that did not reach the webhook (`retried`: a
    watcher restarted on the same directory posts it again)."""
    summary = " ".join(str(msg.get("summary", "")).split())
    return {
        "seq": int(msg.get("seq", 0)),
        "kind": msg.get("kind"),
        "summary": summary[:200],
        "error": error,
        "retried": retried,
    }


class WebhookSender:
    """POSTs messages as JSON to `url` in order, from a background thread, in `fmt` (json: a
    plain JSON event; slack: Slack's incoming-webhook {"text": ...})."""

    def __init__(
        self,
        url: str,
        state_dir: Path,
        *,
        attempts: int = 4,
        backoff_s: float = 0.5,
        timeout_s: float = 5.0,
        fmt: str = "json",
        log: str = "",
    ) -> None:
        self.url = url
        self.fmt, self.log = fmt, log
        self.state = state_dir / WEBHOOK_STATE
        self.attempts, self.backoff_s, self.timeout_s = attempts, backoff_s, timeout_s
        self.queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.delivered_through = 0
        self.failures: list[dict[str, Any]] = []  # given up after every try (undelivered_entry)
        self.sent = 0
        self.down = False  # the last message was given up: one try each until one gets through
        self.last_error = ""
        self._lock = threading.Lock()
        self._waiting: dict[int, dict[str, Any]] = {}  # queued or in flight, by seq
        self._reported = 0
        if self.state.exists():
            try:
                self.delivered_through = int(json.loads(self.state.read_text())["through"])
            except (ValueError, KeyError, TypeError):
                self.delivered_through = 0
        self._thread = threading.Thread(target=self._run, name="forensics-webhook", daemon=True)
        self._thread.start()

    def post(self, msg: dict[str, Any]) -> None:
        """Queue one message (returns at once)."""
        seq = int(msg.get("seq", 0))
        if seq > self.delivered_through:
            with self._lock:
                self._waiting[seq] = msg
            self.queue.put(msg)

    def _run(self) -> None:
        while True:
            msg = self.queue.get()
            if msg is None:
                return
            ok = self._deliver(msg, 1 if self.down else self.attempts)
            self.down = not ok
            seq = int(msg.get("seq", 0))
            with self._lock:
                self._waiting.pop(seq, None)
                if not ok:
                    self.failures.append(undelivered_entry(msg, self.last_error))
            self.delivered_through = max(self.delivered_through, seq)
            write_json_atomic(self.state, {"url": self.url, "through": self.delivered_through})

    def _deliver(self, msg: dict[str, Any], attempts: int) -> bool:
        payload = webhook_body(msg, self.fmt, self.log)
        body = json.dumps(payload, ensure_ascii=False, default=str).encode()
        for attempt in range(attempts):
            req = urllib.request.Request(
                self.url, data=body, headers={"Content-Type": "application/json"}, method="POST"
            )
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310
                    if 200 <= resp.status < 300:
                        self.sent += 1
                        return True
                    self.last_error = f"HTTP {resp.status}"
            except urllib.error.HTTPError as err:
                self.last_error = f"HTTP {err.code}"
            except (urllib.error.URLError, OSError, ValueError) as err:
                reason = getattr(err, "reason", None) or err
                self.last_error = " ".join(str(reason).split()) or type(err).__name__
            if attempt + 1 < attempts:
                time.sleep(self.backoff_s * (2**attempt))
        return False

    def new_failures(self) -> list[dict[str, Any]]:
        """Messages given up since the last call (for the terminal and the state file)."""
        with self._lock:
            new = self.failures[self._reported :]
            self._reported = len(self.failures)
        return new

    def close(self, wait_s: float = 5.0) -> list[dict[str, Any]]:
        """Stop after what is queued, waiting at most `wait_s`; returns the messages given up
        since `new_failures` was last called and those still queued or in flight (not sent:
        `webhook.json` still has them for the next watcher on this directory)."""
        self.queue.put(None)
        self._thread.join(wait_s)
        left = self.new_failures()
        with self._lock:
            waiting = sorted(self._waiting.items())
        why = "not sent before the watcher stopped" + (
            f" (last try: {self.last_error})" if self.last_error else ""
        )
        why += "; a watcher restarted on this --out posts it"
        return left + [undelivered_entry(msg, why, retried=True) for _, msg in waiting]


# --------------------------------------------------------------------------- Prometheus

_METRICS: dict[str, tuple[str, str]] = {
    "forensics_watch_last_step": ("gauge", "Last training iteration read from the log."),
    "forensics_loss": ("gauge", "Last logged training loss."),
    "forensics_loss_ema": ("gauge", "EMA of the training loss (triage's half-life)."),
    "forensics_grad_norm": ("gauge", "Last logged grad norm."),
    "forensics_grad_norm_ema_ratio": (
        "gauge",
        "Grad-norm EMA over its trailing-median baseline (alarm at --grad-factor).",
    ),
    "forensics_open_spikes": ("gauge", "Spikes raised whose verdict is still undecided."),
    "forensics_malignant_spikes": ("gauge", "Spikes in view judged malignant."),
    "forensics_divergence": ("gauge", "1 when a divergence is in view."),
    "forensics_alarm_active": ("gauge", "1 while a grad-norm alarm or loss-scale collapse lasts."),
    "forensics_log_stalled": ("gauge", "1 when the log stopped growing for --stall-after."),
    "forensics_log_last_growth_timestamp_seconds": ("gauge", "When the log last grew."),
    "forensics_events_total": ("counter", "Messages raised, by kind."),
}


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def prometheus_text(log: str, values: dict[str, float | None], counts: dict[str, int]) -> str:
    """The textfile: every metric with HELP/TYPE, labelled with the log path."""
    label = f'log="{_escape_label(log)}"'
    lines: list[str] = []
    for name, (kind, help_text) in _METRICS.items():
        if name == "forensics_events_total":
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
            for k in sorted(counts):
                lines.append(f'{name}{{{label},kind="{_escape_label(k)}"}} {counts[k]}')
            continue
        v = values.get(name)
        if v is None:
            continue
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        lines.append(f"{name}{{{label}}} {_fmt(v)}")
    return "\n".join(lines) + "\n"


def watch_metrics(
    log: str,
    view: dict[str, Any],
    messages: list[dict[str, Any]],
    stalled: bool,
    last_growth: float,
) -> str:
    """The watcher's textfile: its live view's values and its messages counted by kind."""
    counts: dict[str, int] = {}
    for m in messages:
        counts[m["kind"]] = counts.get(m["kind"], 0) + 1
    values = {
        "forensics_watch_last_step": view.get("step"),
        "forensics_loss": view.get("loss"),
        "forensics_loss_ema": view.get("loss_ema"),
        "forensics_grad_norm": view.get("grad_norm"),
        "forensics_grad_norm_ema_ratio": view.get("grad_ratio"),
        "forensics_open_spikes": view.get("open_spikes", 0),
        "forensics_malignant_spikes": view.get("malignant", 0),
        "forensics_divergence": view.get("divergence", 0),
        "forensics_alarm_active": view.get("alarm_active", 0),
        "forensics_log_stalled": int(stalled),
        "forensics_log_last_growth_timestamp_seconds": last_growth,
    }
    return prometheus_text(log, values, counts)


def write_prometheus(path: Path, text: str) -> None:
    write_text_atomic(path, text)
