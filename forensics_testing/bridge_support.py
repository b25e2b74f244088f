"""Helpers for the Megatron-Bridge tests: save folders written by Bridge's own code
(megatron-bridge 0.6.2 in .venv-bridge, scripts/bridge_oracle_env.sh; tests/oracles/
bridge_writer.py) for the small generated run (forensics_testing/small_run.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from forensics_testing.small_run import SMALL

__all__ = ["bridge_common", "bridge_python", "run_bridge_writer", "small_run_blends"]

ROOT = Path(__file__).resolve().parents[1]
ORACLES = ROOT / "tests" / "oracles"


def bridge_python() -> str:
    """The oracle venv's python (built on first use); skip the test with the reason when it
    cannot be built (no package index, a missing wheel)."""
    try:
        done = subprocess.run(
            ["bash", str(ROOT / "scripts" / "bridge_oracle_env.sh")],
            capture_output=True, text=True, timeout=900, cwd=ROOT,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as err:
        pytest.skip(f"Megatron-Bridge oracle env not built: {err}")
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["?"]
        pytest.skip(f"Megatron-Bridge oracle env not built: {tail[0]}")
    return done.stdout.strip().splitlines()[-1]


def small_run_blends(run: Path) -> list[list[list[Any]]]:
    """Each data stage of the small run as Bridge's dataset.blend: [[prefix, ...], [weight, ...]]
    with absolute prefixes."""
    cfg = yaml.safe_load((run / "forensics.yaml").read_text(encoding="utf-8"))
    return [
        [[str(run / d["prefix"]) for d in stage["blend"]], [d["weight"] for d in stage["blend"]]]
        for stage in cfg["data"]["stages"]
    ]


def bridge_common(run: Path) -> dict[str, Any]:
    """The fields every job of the small run shares (as its forensics.yaml states them)."""
    cfg = yaml.safe_load((run / "forensics.yaml").read_text(encoding="utf-8"))
    return {
        "seq_length": cfg["data"]["seq_length"],
        "seed": cfg["data"]["seed"],
        "split": cfg["data"]["split"],
        "global_batch_size": SMALL.global_batch_size,
        "micro_batch_size": 1,
        "train_iters": SMALL.train_iters,
        "tokenizer": str(run / "tokenizer.json"),
        "save_interval": SMALL.checkpoint_interval,
    }


def run_bridge_writer(folders: list[dict[str, Any]], work: Path) -> list[list[dict[str, Any]]]:
    """Write every save folder in one oracle process; what Bridge parsed of each job's
    overrides (train.iterations_to_skip, checkpoint.ckpt_step)."""
    python = bridge_python()
    spec = work / "bridge-spec.json"
    spec.write_text(json.dumps(folders), encoding="utf-8")
    done = subprocess.run(
        [python, str(ORACLES / "bridge_writer.py"), str(spec)],
        capture_output=True, text=True, timeout=900, cwd=work,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
