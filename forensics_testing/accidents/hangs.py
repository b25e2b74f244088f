"""The accident battery's inputs that used to hang a command or read silently wrong: a FIFO or a
device where a file belongs, a log in reversed or shuffled step order, a webhook nobody
answers, watch's seconds options and `score` rows that hold no document."""

from __future__ import annotations

import json
import os
import random
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forensics_testing.accidents.case import Accident, write

# A port on 127.0.0.1 where nothing listens (the TCP "discard" service, never run on CI).
CLOSED_WEBHOOK = "http://127.0.0.1:9/hook"


def fifo(path: str) -> Callable[[Path], None]:
    """`path` (relative to the run) replaced by a FIFO nobody writes to."""

    def apply(run: Path) -> None:
        target = run / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        os.mkfifo(target)

    return apply


def reorder_log(log: str, how: str) -> Callable[[Path], None]:
    """The log's training lines reversed or shuffled (the other lines stay on top)."""

    def apply(run: Path) -> None:
        lines = (run / log).read_text().splitlines()
        train = [ln for ln in lines if "iteration" in ln and "/" in ln]
        rest = [ln for ln in lines if ln not in set(train)]
        train = train[::-1] if how == "reversed" else random.Random(5).sample(train, len(train))
        (run / log).write_text("\n".join(rest + train) + "\n")

    return apply


def same_triage(run: Path, proc: subprocess.CompletedProcess) -> str | None:
    """The reordered log's triage (t/) reads every row and finds what the run's own triage/
    found, and says it sorted the rows."""
    ours, base = (json.loads((run / d / "summary.json").read_text()) for d in ("t", "triage"))
    for key in ("status", "rows", "first_step", "last_step"):
        if ours[key] != base[key]:
            return f"{key}: {ours[key]} for the reordered log, {base[key]} in order"
    if "out of order" not in " ".join((proc.stdout + proc.stderr).split()):
        return "does not say the steps were out of order"
    return None


def hangs_and_order(
    add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]
) -> None:
    """Accidents of a FIFO or device as an input, log order, webhook delivery, watch's seconds
    and score's rows that are not documents."""
    blocking_inputs(add, info, names)
    watch_options(add, names["wa"])
    order_and_rows(add, names["log"])


def blocking_inputs(
    add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]
) -> None:
    """A FIFO nobody writes to, as each command's input and as a data file a config names."""
    wa, replay, spike = names["wa"], names["replay"], names["spike"]
    for cmd, argv in (
        ("score", ["score", "pipe.jsonl", "--out", "s.parquet"]),
        ("triage", ["triage", "pipe.jsonl", "--out", "t"]),
        ("watch", [*wa[:1], "pipe.jsonl", *wa[2:]]),
        ("manifest", ["manifest", "pipe.jsonl", "--fields", "url"]),
        ("check-skip", ["check-skip", "pipe.jsonl", "--config", "forensics.yaml"]),
        ("spike --config", [*spike, "--config", "pipe.jsonl", "--out", "s"]),
    ):
        add(
            Accident(
                f"{cmd}: a FIFO nobody writes to",
                argv,
                fifo("pipe.jsonl"),
                names="pipe.jsonl",
                needle="is a FIFO or pipe, not a regular file",
            )
        )
    add(
        Accident(
            "replay: a .bin replaced by a FIFO",
            [*replay, "--out", "w.parquet"],
            fifo(f"{info['first_prefix']}.bin"),
            names=f"{info['first_prefix']}.bin",
            needle="is a FIFO or pipe, not a regular file",
        )
    )


def watch_options(add: Callable[[Accident], None], wa: list[str]) -> None:
    """watch on a device, with a nan interval, a log in a missing folder, a dead webhook."""
    add(
        Accident(
            "watch: /dev/zero",
            [*wa[:1], "/dev/zero", *wa[2:]],
            names="/dev/zero",
            needle="character device",
        )
    )
    add(
        Accident(
            "watch: --interval nan",
            [*wa, "--interval", "nan"],
            names="--interval",
            needle="must be a positive number of seconds",
        )
    )
    add(
        Accident(
            "watch: log in a folder that does not exist",
            [*wa[:1], "nope/train.log", *wa[2:]],
            names="nope/train.log",
            needle="neither it nor its folder exists",
        )
    )
    add(
        Accident(
            "watch: --webhook to a closed port",
            [*wa, "--webhook", CLOSED_WEBHOOK],
            names=CLOSED_WEBHOOK,
            needle="never delivered",
            kept=("w/**",),  # the watch folder: its state.json lists what was not delivered
        )
    )


def order_and_rows(add: Callable[[Accident], None], log: str) -> None:
    """A log in reversed or shuffled order reads as the original; score counts non-documents
    apart."""
    for how in ("reversed", "shuffled"):
        add(
            Accident(
                f"triage: the log's lines {how}",
                ["triage", log, "--out", "t"],
                reorder_log(log, how),
                expect="ok",
                check=same_triage,
                outputs=("t/**",),
            )
        )
    add(
        Accident(
            "score: null and number-only texts",
            ["score", "d.jsonl", "--out", "s.parquet"],
            write("d.jsonl", '{"text": null}\n{"text": 42}\n{"text": "a document"}\n'),
            expect="ok",
            check=lambda run, proc: (
                None
                if "scored 1 documents (2 more rows are not documents"
                in " ".join(proc.stdout.split())
                else f"not counted apart: {proc.stdout[-200:]!r}"
            ),
            outputs=("s.parquet",),
        )
    )
