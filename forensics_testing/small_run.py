"""A small generated Megatron run (seconds to build) and its complete spike output, for the
fuzz, fault and accident tests, which need a real run but not a realistic one.

Tests that change anything work on a copy (`copy_run`): the fixture's files are shared.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from forensics.spike import SpikeOptions, run_spike
from forensics_testing.demo.build import DemoSpec, build_run

SMALL = DemoSpec(
    name="small",
    seed=7,
    seq_length=64,
    global_batch_size=8,
    train_iters=300,
    switch_iteration=151,
    spike_iteration=170,
    checkpoint_interval=50,
    log_tail=20,
    dirty_kind="spam",
    docs_prose=120,
    docs_code=100,
    docs_per_crawl=30,
    crawls_v1=2,
    crawls_v2=2,
    vocab_size=1000,
)
WINDOW = 40
SPIKE_ARGS = ["--step", str(SMALL.spike_iteration), "--window", str(WINDOW), "--embed-cap", "0"]
REPO = Path(__file__).resolve().parents[1]


def build_small_run(root: Path) -> Path:
    """The run in `root/run` with a complete `root/run/spike/` (returns the run directory)."""
    run = root / "run"
    build_run(run, SMALL, progress=False)
    options = SpikeOptions(step=SMALL.spike_iteration, window=WINDOW, embed_cap=0, progress=False)
    run_spike(run / "forensics.yaml", run / "spike", options)
    return run


def copy_run(run: Path, dest: Path) -> Path:
    """A private copy of the run (its spike output and cache included)."""
    shutil.copytree(run, dest, symlinks=True)
    return dest


def cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """`forensics ARGS` in a fresh interpreter, as a user runs it (wide lines: no wrapping)."""
    full = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="400", PYTHONPATH=str(REPO))
    full.update(env or {})
    cmd = [sys.executable, "-m", "forensics.cli", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=full, timeout=timeout)


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (relative path -> bytes), to prove nothing changed."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }
