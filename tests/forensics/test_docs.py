"""The README is a front door: short, the two set-up commands on its first screen, every link
going somewhere; and the docs and code say what is, not how it came to be."""

from __future__ import annotations

import re
import subprocess

from forensics_testing.repo_paths import REPO_ROOT

README = REPO_ROOT / "README.md"


def test_readme_is_short_and_starts_with_the_set_up_commands() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 300
    first_screen = "\n".join(lines[:60])
    assert "bash scripts/demo.sh" in first_screen and "bash scripts/test.sh" in first_screen


def test_readme_links_resolve() -> None:
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    assert targets
    missing = [t for t in targets if not t.startswith("http") and not (REPO_ROOT / t).exists()]
    assert not missing


def test_no_issue_numbers_in_code_or_docs() -> None:
    """History lives in git and docs/CHANGELOG.md, not in comments, docstrings or pages."""
    files = subprocess.run(
        ["git", "ls-files", "*.py", "*.md", "*.sh", "*.yaml", "*.toml"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    pattern = re.compile(r"\bissue\s*#?\d+", re.IGNORECASE)
    found = [
        f"{name}:{number}"
        for name in files
        if (REPO_ROOT / name).is_file()
        for number, line in enumerate((REPO_ROOT / name).read_text().splitlines(), start=1)
        if pattern.search(line)
    ]
    assert not found
