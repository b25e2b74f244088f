"""The command line's own options: -h, --version, commands listed in runbook order."""

from __future__ import annotations

import subprocess
import sys

from forensics_testing.repo_paths import REPO_ROOT


def _cli(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "forensics.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env={"COLUMNS": "120", "PATH": ""})


def test_version_and_short_help() -> None:
    from importlib.metadata import version

    out = _cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"forensics {version('forensics')}"
    short = _cli("-h")
    assert short.returncode == 0 and short.stdout == _cli("--help").stdout


def test_commands_in_runbook_order() -> None:
    """--help lists the README runbook's commands in its order, then the tools around them; -h
    on every command is its --help."""
    import re

    readme = (REPO_ROOT / "README.md").read_text()
    runbook = readme.split("## The runbook", 1)[1].split("```")[1]
    steps = list(dict.fromkeys(re.findall(r"^forensics ([a-z][a-z-]+)", runbook, re.M)))
    assert steps == ["triage", "spike", "rebuild", "check-skip"]
    commands = _cli("--help").stdout.split("Commands")[1]
    listed = re.findall(r"^\W+([a-z][a-z-]+)\s{2,}\S", commands, re.M)
    assert listed == [*steps, "watch", "scan", "replay", "score", "manifest", "rescore"]
    for name in listed:
        assert _cli(name, "-h").stdout == _cli(name, "--help").stdout, name


def test_switches_are_shown_as_switches() -> None:
    """`--force` takes no value: --help must not print it as `--force <bool>` (typer's default),
    nor -h/--help, on the top level and on every command."""
    import re

    commands = _cli("--help").stdout.split("Commands")[1]
    listed = re.findall(r"^\W+([a-z][a-z-]+)\s{2,}\S", commands, re.M)
    assert "spike" in listed
    for name in ["", *listed]:
        text = _cli(*([name] if name else []), "-h").stdout
        assert "--help" in text and "<bool>" not in text, name
    spike = _cli("spike", "-h").stdout
    assert re.search(r"--window\s+<int>", spike)  # options with values keep their type
