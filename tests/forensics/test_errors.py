"""Whose problem an error is: the config's, the data's or the machine's, each one line (exit 2);
anything else is our bug (exit 3, the traceback in a file)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from dataloaders.megatron.indexed import IndexedDataset
from dataloaders.run_config import load_config
from forensics.errors import ConfigError, DataError, EnvironmentProblem, ForensicsError
from forensics_testing.refusal import one_line_error
from forensics_testing.small_run import cli


def test_the_kinds_are_forensics_errors_that_say_whose_problem_it_is(tmp_path: Path) -> None:
    (tmp_path / "run.yaml").write_text("data: [1, 2]\n")
    with pytest.raises(ConfigError, match="run.yaml"):
        load_config(tmp_path / "run.yaml")
    (tmp_path / "x.idx").write_bytes(b"not an index")
    with pytest.raises(DataError, match="x.bin: Megatron dataset file not found"):
        IndexedDataset(tmp_path / "x")
    assert all(issubclass(k, ForensicsError) for k in (ConfigError, DataError, EnvironmentProblem))


def test_environment_problems_from_an_os_error_or_polars_message() -> None:
    full = EnvironmentProblem.of(OSError(errno.ENOSPC, "No space left on device", "/out/a.parquet"))
    assert str(full).startswith("/out/a.parquet: No space left on device: the disk is full")
    # polars wraps the OS error of a failed write in its ComputeError: only the text says which
    denied = EnvironmentProblem.of(RuntimeError("failed to write: Permission denied (os error 13)"))
    assert str(denied) == "Permission denied: check the permissions of that path, or choose another"
    assert EnvironmentProblem.of(ValueError("os error 2")) is None  # ENOENT: not the machine's
    assert EnvironmentProblem.of(KeyError("x")) is None


def test_a_bad_config_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "forensics.yaml").write_text("data: [1, 2]\n")
    one_line_error(
        cli("replay", "--step", "5", "--out", "w.parquet", cwd=tmp_path), "forensics.yaml"
    )
