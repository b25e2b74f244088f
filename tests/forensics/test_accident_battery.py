"""The accident battery (`forensics_testing.accidents`), one pytest case per accident, its id the
accident's name: every command given a bad input on a fresh copy of the small run answers
with the right result or one clear line, in seconds, and changes no file it was not asked to
write. scripts/accidents.py runs the same accidents on any run directory (demo-run/).
"""

from __future__ import annotations

import fcntl
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from forensics_testing.accidents import base_info, battery, prepare_base, run_one
from forensics_testing.accidents.results import PENDING
from forensics_testing.small_run import SMALL

# The names are fixed before the run exists: no accident's name depends on the run's numbers
# or paths, only on whether it has data stages (the small run has two). The fixture checks
# that the real run's battery has exactly these names.
_NAMING_FACTS = {
    "step": 0,
    "train_iters": 0,
    "first_prefix": "",
    "web_prefix": "",
    "manifest": "",
    "first_docs": 0,
    "stages": True,
    "checkpoints": [0, 0, 0],
    "rollback": 0,
}
NAMES = [accident.name for accident in battery(_NAMING_FACTS)]


@pytest.fixture(scope="session")
def accident_run(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> SimpleNamespace:
    """The small run with its triage/ and spike/ output, and the battery for it: built once and
    shared by the xdist workers (each accident works on its own copy)."""
    root = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        root = root.parent  # the folder every worker's basetemp sits in
    work, ready = root / "accident-battery", root / "accident-battery.ready"
    with open(root / "accident-battery.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ready.exists():
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            prepare_base(SMALL, work, work / "cache")
            ready.touch()
    base = work / "base"
    accidents = {accident.name: accident for accident in battery(base_info(base))}
    assert list(accidents) == NAMES
    return SimpleNamespace(base=base, work=work, cache=work / "cache", accidents=accidents)


def test_the_battery_is_whole() -> None:
    """Every command is tried, and no two accidents share a name (a name is a test id)."""
    assert len(NAMES) == len(set(NAMES)) >= 200
    commands = {name.split(":")[0].split()[0] for name in NAMES}
    assert {"triage", "replay", "manifest", "score", "spike", "check-skip", "scan", "watch",
            "rescore"} <= commands  # fmt: skip


def test_every_refusal_names_its_file_and_problem_and_every_success_is_checked() -> None:
    """A refusal passes only when it says the file (or flag, or field) and the problem
    (forensics_testing/accidents/expected.py); an accident that may succeed has a check of its
    result (results.py), so an exit 0 with a wrong answer counts as silent wrong."""
    accidents = battery(_NAMING_FACTS)
    vague = [a.name for a in accidents if a.expect == "refuse" and not (a.names and a.needle)]
    unchecked = [a.name for a in accidents if a.expect != "refuse" and a.check is None]
    assert not vague, vague
    assert not unchecked, unchecked


def test_a_refusal_that_does_not_name_the_file_is_unclear(tmp_path: Path) -> None:
    import subprocess

    from forensics_testing.accidents import Accident, Verdict
    from forensics_testing.accidents.run import judge

    accident = Accident("x", ["replay"], names="forensics.yaml", needle="seq_length")
    for stderr, unclear in (
        ("error: forensics.yaml: data.seq_length: must be positive\n", False),
        ("error: data.seq_length: must be positive\n", True),
        ("error: forensics.yaml: must be positive\n", True),
    ):
        proc = subprocess.CompletedProcess([], 2, "", stderr)
        verdict = Verdict(accident, 2, 0.0)
        judge(accident, tmp_path, proc, {}, verdict)
        assert ("unclear" in verdict.problems) == unclear, (stderr, verdict.problems)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(reason=PENDING[n], strict=True))
        if n in PENDING
        else n
        for n in NAMES
    ],
)
def test_accident(name: str, accident_run: SimpleNamespace) -> None:
    verdict = run_one(
        accident_run.accidents[name], accident_run.base, Path(accident_run.work), accident_run.cache
    )
    assert not verdict.problems, "; ".join(f"{k}: {v}" for k, v in verdict.problems.items())
