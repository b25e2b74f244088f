"""docs/extending.md's counts, proven on a copy of the source: what a new trainer and a new loader
family touch.

Each test copies forensics/ and dataloaders/ into a temporary tree, adds the throwaway trainer
(or family) the way docs/extending.md says, counts the files that differ from the checkout, and
runs the tool from the copy in a fresh interpreter (PYTHONPATH at the copy): the trainer reaches
`forensics spike`'s skip-flag writer, the family `forensics replay`. A place that still names
every trainer or family (a table, an if/else) fails the run or the count, so the claim in the
docs cannot drift from the code.
"""

from __future__ import annotations

import ast
import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from forensics_testing.small_run import SPIKE_ARGS, copy_run

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("forensics", "dataloaders")

# A trainer whose loop is Megatron-LM's (a skipped step draws its global batch, both counters
# advance), spelled its own way: `--throwaway-skip 5 6 9` skips the batches logged as 5, 6, 9.
TRAINER_MODULE = '''"""A throwaway trainer (tests/forensics/test_extending.py)."""

from __future__ import annotations

from collections.abc import Sequence

from dataloaders.errors import ForensicsError
from dataloaders.trainers.base import (
    Batches,
    Draw,
    LoopEnd,
    LoopStart,
    Range,
    Trainer,
    iterations_of,
)


class Throwaway(Trainer):
    name = "throwaway"
    flag = "--throwaway-skip"
    semantics = "value k skips the batch logged as iteration k (drawn, counted, not trained)"
    output_format = "throwaway"

    def parse(self, text: str) -> list[int]:
        words = text.split()
        if not words:
            return []
        if words[0] != self.flag or not all(w.isdigit() for w in words[1:]):
            raise ForensicsError(f"expected {self.flag} K..., got {text[:60]!r}")
        return [int(w) for w in words[1:]]

    def loop(self, start: LoopStart, skip: Sequence, stop: int) -> LoopEnd:
        iteration, consumed, draws = start.iteration, start.consumed_samples, []
        while iteration < stop:
            size = start.batch_size_at(consumed)
            iteration += 1
            draws.append(Draw(iteration, consumed, size, iteration not in skip, consumed + size))
            consumed += size
        return LoopEnd(draws, iteration, consumed, consumed)

    def spell(self, ranges: Sequence[Range], schedule: Batches, checkpoint: int) -> str:
        return " ".join([self.flag, *map(str, iterations_of(ranges))]) if ranges else ""

    def pin(self, checkpoint: int) -> str:
        return f"--throwaway-load {checkpoint}"

    def consequence(self, skipped: int) -> str:
        return f"the job trains {skipped} fewer steps"
'''

FAMILY_CONFIG = '''"""The throwaway family's `data:` section: HF's, under its own format."""

from typing import Literal

from {hf_config} import HFData


class ThrowawayData(HFData):
    format: Literal["throwaway-hf"] = "throwaway-hf"
'''

FAMILY_MODULE = '''"""A throwaway loader family reusing the Hugging Face replayer."""

from dataloaders.hf.family import HFFamily
from dataloaders.throwaway.config import ThrowawayData


class ThrowawayFamily(HFFamily):
    name = "throwaway-hf"
    config_model = ThrowawayData
'''


def copy_sources(root: Path) -> Path:
    """forensics/ and dataloaders/ as the checkout has them (no caches), under `root`."""
    for name in SOURCES:
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def changed_files(copy: Path) -> list[str]:
    """Files added, removed or changed in the copy, relative to the checkout."""
    changed: list[str] = []

    def walk(cmp: filecmp.dircmp, rel: Path) -> None:
        for name in cmp.left_only + cmp.right_only + cmp.diff_files:
            if name != "__pycache__":
                changed.append(str(rel / name))
        for name, sub in cmp.subdirs.items():
            if name != "__pycache__":
                walk(sub, rel / name)

    for name in SOURCES:
        walk(filecmp.dircmp(REPO / name, copy / name, ignore=["__pycache__"]), Path(name))
    return sorted(changed)


def registry_line(path: Path, import_line: str, entry: str) -> None:
    """Append `entry` to the `_ALL` tuple of a registry module and import it there."""
    text = path.read_text()
    tree = ast.parse(text)
    registry = next(
        node.value
        for node in tree.body
        if isinstance(node, ast.AnnAssign | ast.Assign)
        and "_ALL" in {t.id for t in ast.walk(node) if isinstance(t, ast.Name)}
        and isinstance(node.value, ast.Tuple)
    )
    last = registry.elts[-1]
    lines = text.splitlines(keepends=True)
    row = lines[last.end_lineno - 1]
    lines[last.end_lineno - 1] = (
        row[: last.end_col_offset] + f", {entry}" + row[last.end_col_offset :]
    )
    first = next(n for n in tree.body if isinstance(n, ast.Assign | ast.AnnAssign))
    lines.insert(first.lineno - 1, import_line + "\n")  # above the module's first assignment
    path.write_text("".join(lines))


def run_copy(copy: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`forensics ARGS` from the copied source, in a fresh interpreter."""
    env = dict(os.environ, PYTHONPATH=str(copy), HF_HUB_OFFLINE="1", COLUMNS="400")
    cmd = [sys.executable, "-m", "forensics.cli", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_a_new_trainer_is_one_module_and_its_registry_entry(
    small_run: Path, tmp_path: Path
) -> None:
    """The throwaway trainer module plus its entry in dataloaders/trainers/__init__.py (2 files)
    and `forensics spike --trainer throwaway` is accepted and writes the trainer's proven flag
    and its restart file."""
    copy = copy_sources(tmp_path / "src")
    (copy / "dataloaders/trainers/throwaway.py").write_text(TRAINER_MODULE)
    registry_line(
        copy / "dataloaders/trainers/__init__.py",
        "from dataloaders.trainers.throwaway import Throwaway",
        "Throwaway()",
    )
    assert changed_files(copy) == [
        "dataloaders/trainers/__init__.py",
        "dataloaders/trainers/throwaway.py",
    ]

    run = copy_run(small_run, tmp_path / "run")
    args = ["spike", "--config", "forensics.yaml", *SPIKE_ARGS, "--trainer", "throwaway"]
    done = run_copy(copy, *args, "--out", "spike", "--force", "--quiet", cwd=run)
    assert done.returncode == 0, done.stderr[-2000:]
    skip = json.loads((run / "spike/skip.json").read_text())
    assert skip["trainer"] == "throwaway"
    flag = skip["flags"]["throwaway"]
    assert flag["flag"].startswith("--throwaway-skip "), flag
    skipped = [int(v) for v in flag["flag"].split()[1:]]
    assert skipped == [i for a, b in skip["iterations"] for i in range(a, b + 1)]
    restart = (run / "spike/restart-throwaway.flags").read_text()
    assert flag["flag"] in restart


def hf_config_module(copy: Path) -> str:
    """The module that defines the Hugging Face family's config model (HFData)."""
    for path in sorted((copy / "dataloaders").rglob("*.py")):
        if "class HFData(" in path.read_text():
            return ".".join(path.relative_to(copy).with_suffix("").parts)
    raise AssertionError("no HFData in dataloaders/")


def add_family(copy: Path) -> None:
    """The throwaway family's package and its registry entry (its config model joins the
    `data:` union through its Family)."""
    package = copy / "dataloaders/throwaway"
    package.mkdir()
    (package / "__init__.py").write_text('"""A throwaway loader family."""\n')
    (package / "config.py").write_text(FAMILY_CONFIG.format(hf_config=hf_config_module(copy)))
    (package / "family.py").write_text(FAMILY_MODULE)
    registry_line(
        copy / "dataloaders/families.py",
        "from dataloaders.throwaway.family import ThrowawayFamily",
        "ThrowawayFamily()",
    )


def hf_run(folder: Path, data_format: str) -> Path:
    """A map-style Hugging Face run over two small Parquet files, as `data_format`."""
    folder.mkdir(exist_ok=True)
    for k in range(2):
        texts = [f"page {k}-{i}: " + "words " * (5 + i % 7) for i in range(24)]
        pq.write_table(pa.table({"text": texts}), folder / f"part-{k}.parquet")
    datasets = pytest.importorskip("datasets")
    config = {
        "name": "throwaway-run",
        "data": {
            "format": data_format,
            "files": ["part-0.parquet", "part-1.parquet"],
            "datasets_version": datasets.__version__,
            "seed": 3,
            "world_size": 2,
            "per_device_batch_size": 4,
        },
        "training": {"global_batch_size": 8, "train_iters": 6},
    }
    path = folder / f"{data_format}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_new_family_is_one_package_and_its_registry_entry(tmp_path: Path) -> None:
    """The throwaway family (a package reusing the HF replayer) plus its entry in
    dataloaders/families.py: the `data:` union takes its config model from the registry, and
    `forensics replay` of a run declaring it gives the HF family's table."""
    copy = copy_sources(tmp_path / "src")
    add_family(copy)
    assert changed_files(copy) == [
        "dataloaders/families.py",
        "dataloaders/throwaway",
    ]  # the package: __init__.py, config.py and family.py

    run = tmp_path / "run"
    tables = {}
    for data_format in ("throwaway-hf", "hf"):
        config = hf_run(run, data_format)
        out = run / f"{data_format}.parquet"
        args = ["replay", "--config", str(config), "--step", "6", "--window", "6"]
        done = run_copy(copy, *args, "--out", str(out), "--no-progress", cwd=run)
        assert done.returncode == 0, done.stderr[-2000:]
        tables[data_format] = pl.read_parquet(out)
    assert tables["throwaway-hf"].height > 0
    assert tables["throwaway-hf"].equals(tables["hf"])
