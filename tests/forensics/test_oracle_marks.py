"""The `oracle` marker is earned from the code a test runs (forensics_testing/oracle_use.py).

Synthetic modules pin the reading (a library imported two helpers away, through a module
attribute, a fixture, a constant; our own packages not followed), and a few of this suite's own
tests pin the result: a test that runs a real library is marked, one that does not is not.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from forensics_testing.oracle_use import OracleUse
from forensics_testing.repo_paths import REPO_ROOT

HELPERS = """
import shutil
BROWSER = shutil.which("chromium")


def run_library():
    from megatron.core.datasets import helpers
    return helpers


def own_code():
    return 1
"""

MIDDLE = """
from oru_helpers import run_library, own_code


def wraps_library():
    return run_library()


def wraps_own_code():
    return own_code()
"""

TESTS = """
import oru_middle
from oru_helpers import BROWSER
from forensics.oru_runtime import uses_megatron


def test_through_a_module_attribute():
    oru_middle.wraps_library()


def test_own_code_only():
    oru_middle.wraps_own_code()


def test_through_a_constant():
    assert BROWSER


def test_trains_a_model(loss):
    loss.backward()


def test_our_runtime_is_not_followed():
    uses_megatron()


def fixture_body():
    import olmo_core
    return olmo_core
"""

RUNTIME = """
def uses_megatron():
    import megatron
"""


@pytest.fixture
def fake_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "oru_helpers.py").write_text(HELPERS)
    (tmp_path / "oru_middle.py").write_text(MIDDLE)
    (tmp_path / "oru_tests.py").write_text(TESTS)
    (tmp_path / "forensics").mkdir()
    (tmp_path / "forensics" / "oru_runtime.py").write_text(RUNTIME)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("oru_helpers", "oru_middle", "oru_tests"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import forensics

    monkeypatch.setattr(forensics, "__path__", [*forensics.__path__, str(tmp_path / "forensics")])
    return tmp_path


def test_the_reading_follows_helpers_and_stops_at_our_runtime(fake_repo: Path) -> None:
    import oru_tests

    use = OracleUse(root=fake_repo)
    assert use.of_function(oru_tests.test_through_a_module_attribute) == (
        "imports a real library (oru_helpers.py:6)"
    )
    assert use.of_function(oru_tests.test_own_code_only) is None
    assert use.of_function(oru_tests.test_through_a_constant) == (
        "renders in Chromium (oru_helpers.py:3)"
    )
    assert use.of_function(oru_tests.test_trains_a_model).startswith("trains a torch model")
    assert use.of_function(oru_tests.test_our_runtime_is_not_followed) is None
    assert use.of_function(oru_tests.fixture_body).startswith("imports a real library")


def _function(relative: str, name: str):
    """The function `name` of a test module (its name may be a prefix)."""
    path = REPO_ROOT / "tests" / relative
    spec = importlib.util.spec_from_file_location(f"oracle_marks_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return next(getattr(module, n) for n in dir(module) if n.startswith(name))


@pytest.mark.parametrize(
    ("relative", "name", "reason"),
    [
        ("forensics/skip/test_skip_upstream.py", "test_trainer_source_on_random_runs", "imports"),
        ("forensics/scan/test_scan.py", "test_instance_flags_agree_with_olmo_core", "reads"),
        (
            "dataloaders/mosaic/test_mosaic_order.py",
            "test_ordering_functions_equal_the_library",
            "runs",
        ),
        ("dataloaders/mosaic/test_mosaic_config.py", "test_unsupported_settings_are_refused", None),
        ("forensics/scan/test_scan.py", "test_bad_range_is_refused_before_any_work", None),
        ("forensics/score/test_scan_repeats.py", "test_batched_equals_one_by_one", None),
    ],
)
def test_this_suites_tests_are_read_right(relative: str, name: str, reason: str | None) -> None:
    found = OracleUse().of_function(_function(relative, name))
    if reason is None:
        assert found is None
    else:
        assert found and found.startswith(reason), found
