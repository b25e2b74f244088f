"""Where the checkout and its suite are, so every test module and support module agrees on it."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]  # the checkout: configs/, scripts/
TESTS = REPO_ROOT / "tests"  # the suite and its oracles (tests/oracles/)
SHARED = REPO_ROOT.parent / "shared"  # ../shared: the curves and notes handed to the project
