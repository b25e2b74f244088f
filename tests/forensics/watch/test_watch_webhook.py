"""`watch --webhook-format slack|json`: what reaches the receiver
(forensics_testing/webhook_receiver.py, a
local HTTP server that fails the first POST) is Slack's incoming-webhook payload, {"text": ...}
in mrkdwn, or a plain, flat JSON event, for every message, once, in order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_watch import _follow
from typer.testing import CliRunner

from forensics.cli import app
from forensics.watch.sinks import json_event, slack_body
from forensics_testing.refusal import refused
from forensics_testing.webhook_receiver import Receiver, serve_webhook


def test_slack_payloads_from_a_live_malignant_spike(tmp_path: Path) -> None:
    with serve_webhook() as url:
        w, msgs, _ = _follow(
            "malignant", tmp_path, webhook=url, webhook_format="slack", webhook_backoff_s=0.01
        )
    bodies = Receiver.bodies
    assert len(bodies) == len(msgs) and all(set(b) == {"text"} for b in bodies)
    for body, msg in zip(bodies, msgs, strict=True):
        assert f"#{msg['seq']})" in body["text"].splitlines()[0]
    confirmed = next(b["text"] for b, m in zip(bodies, msgs, strict=True)
                     if m.get("status") == "confirmed")  # fmt: skip
    head, summary, code = confirmed.splitlines()
    assert head.startswith(":rotating_light: *forensics watch: plan confirmed at step 3000* (`")
    assert summary.startswith("plan confirmed (malignant) for the spike at step 3000")
    assert code.startswith("```forensics spike --config &lt;run-config.yaml&gt; --step 3000")
    assert code.endswith("```")


def test_json_events_are_flat_with_severity(tmp_path: Path) -> None:
    with serve_webhook() as url:
        w, msgs, _ = _follow("malignant", tmp_path, webhook=url, webhook_backoff_s=0.01)
    bodies = Receiver.bodies
    assert [b["seq"] for b in bodies] == [m["seq"] for m in msgs]
    assert all(b["source"] == "forensics watch" and "event" not in b for b in bodies)
    assert all(json.loads(json.dumps(b)) == b for b in bodies)
    by_kind = {(b["message"], b.get("verdict")): b for b in bodies}
    raised = by_kind[("raised", "undecided")]
    assert raised["severity"] == "warning" and raised["rollback_iteration"] < 3000
    assert raised["next_command"].startswith("forensics spike --config")
    assert raised["decide_by_step"] == 3000 + 200  # the tests' 200-step recovery window
    assert by_kind[("verdict", "malignant")]["severity"] == "critical"


def test_slack_text_is_escaped_and_json_lifts_the_plan() -> None:
    msg = {"seq": 4, "message": "raised", "kind": "spike", "verdict": "undecided", "step": 7,
           "summary": "curve <@here> & co", "event": {"rollback_iteration": 5,
           "next_command": "forensics spike --config 'a b.yaml' --step 7"}}  # fmt: skip
    text = slack_body(msg, "logs/<x>.log")["text"]
    assert "curve &lt;@here&gt; &amp; co" in text and "`logs/&lt;x&gt;.log`" in text
    assert "```forensics spike --config 'a b.yaml' --step 7```" in text
    body = json_event(msg, "train.log")
    assert body["rollback_iteration"] == 5 and body["severity"] == "warning"
    assert body["log"] == "train.log" and "event" not in body


@pytest.mark.parametrize("fmt", ["pagerduty", "Slack"])
def test_unknown_webhook_format_refused(tmp_path: Path, fmt: str) -> None:
    log = tmp_path / "train.log"
    log.write_text("")
    args = ["watch", str(log), "--out", str(tmp_path / "w"), "--webhook", "http://127.0.0.1:9/x"]
    result = CliRunner().invoke(app, [*args, "--webhook-format", fmt])
    refused(result, f"--webhook-format {fmt}: choose one of json, slack")
    assert not (tmp_path / "w").exists()
