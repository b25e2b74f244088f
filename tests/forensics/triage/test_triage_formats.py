"""The log-format registry: every format answers for itself, and both commands' --format help
comes from it."""

from __future__ import annotations

import typer

from forensics.cli import app
from forensics.triage.formats import FORMATS, REGISTRY, LogFormat, triage_help, watch_help


def test_every_format_is_listed_once_and_reads_itself() -> None:
    assert FORMATS[0] == "auto" and FORMATS[1:] == tuple(REGISTRY)
    for name, fmt in REGISTRY.items():
        assert isinstance(fmt, LogFormat) and fmt.name == name
        # a format watch follows line by line parses lines; the others are refused by watch
        if fmt.grows and not fmt.follows_events:
            assert type(fmt.watched_as()).parse_lines is not LogFormat.parse_lines


def test_format_help_is_the_registry() -> None:
    assert triage_help() == (
        "auto|megatron|megatron-bridge|olmo-core|torchtitan|tensorboard|wandb-csv|jsonl|csv|"
        "hf-trainer-state"
    )
    assert (
        watch_help() == "auto|megatron|megatron-bridge|olmo-core|torchtitan|jsonl|csv|tensorboard"
    )
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    for name, want in (("triage", triage_help()), ("watch", watch_help())):
        (option,) = [p for p in commands[name].params if p.name == "format"]
        assert option.help == want
