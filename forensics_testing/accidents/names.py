"""The paths and command lines every part of the accident battery shares, from the base run's
facts (`run.base_info`)."""

from __future__ import annotations

import json
from typing import Any

from forensics_testing.accidents.case import write


def shared_names(info: dict[str, Any]) -> dict[str, Any]:
    """The paths and command lines every group of accidents shares."""
    step, end = info["step"], info["train_iters"]
    spike = ["spike", "--step", str(step), "--window", "20", "--embed-cap", "0", "--quiet"]
    replay = ["replay", "--config", "forensics.yaml", "--step", str(step), "--window", "2"]
    log = "logs/train.log"
    first = info["first_prefix"]  # e.g. data/prose_text_document
    web = info["web_prefix"]
    # ---- triage
    tri = ["triage", log, "--out", "t"]
    # ---- manifest
    jsonl = "docs.jsonl"
    docs = "".join(
        json.dumps({"text": f"d{i}", "url": f"u{i}", "source": "s"}) + "\n"
        for i in range(info["first_docs"])
    )
    mk = write(jsonl, docs)
    man = ["manifest", jsonl, "--fields", "url"]
    # ---- check-skip
    cs = ["check-skip", "spike/skip.json", "--config", "forensics.yaml"]
    # ---- scan
    sc = ["scan", "--from", str(step - 10), "--to", str(step), "--out", "sc", "--quiet"]
    # ---- watch (one poll)
    wa = ["watch", log, "--max-polls", "1", "--interval", "0.1", "--no-live", "--out", "w"]
    # ---- rescore (the cheap refusals)
    rs = ["rescore", "--step", str(step), "--window", "5", "--out", "r"]
    return {
        "step": step,
        "end": end,
        "spike": spike,
        "replay": replay,
        "log": log,
        "first": first,
        "web": web,
        "tri": tri,
        "jsonl": jsonl,
        "docs": docs,
        "mk": mk,
        "man": man,
        "cs": cs,
        "sc": sc,
        "wa": wa,
        "rs": rs,
    }
