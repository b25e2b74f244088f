"""Where the suite's files are, so test modules at any depth of tests/ agree on it."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent  # tests/: the support modules and oracles
REPO_ROOT = TESTS.parent  # the checkout: configs/, scripts/
SHARED = REPO_ROOT.parent / "shared"  # ../shared: the curves and notes handed to the project
