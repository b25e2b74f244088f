"""torchtitan 0.3.0 as the oracle of the trainer's tests (.venv-titan, built by
scripts/torchtitan_oracle_env.sh): its python, and console logs written by its own logging code
(tests/oracles/torchtitan_metrics_log.py runs `MetricsProcessor.log` and `log_validation`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

__all__ = ["ORACLES", "titan_python", "write_titan_log"]

ROOT = Path(__file__).resolve().parents[1]
ORACLES = ROOT / "tests" / "oracles"


def titan_python() -> str:
    """The oracle venv's python (built on first use); skip the test with the reason when it
    cannot be built (no package index, a missing wheel)."""
    script = ROOT / "scripts" / "torchtitan_oracle_env.sh"
    try:
        done = subprocess.run(
            ["bash", str(script)], capture_output=True, text=True, timeout=900, cwd=ROOT
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        pytest.skip(f"torchtitan oracle env not built: {err}")
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["?"]
        pytest.skip(f"torchtitan oracle env not built: {tail[0]}")
    return done.stdout.strip().splitlines()[-1]


def write_titan_log(path: Path, spec: dict[str, Any]) -> Path:
    """`path` written by torchtitan's metrics logger for `spec` (the oracle script's input:
    color, log_freq, quantized, steps [[step, avg_loss, max_loss, grad_norm]], validations)."""
    python = titan_python()
    spec_file = path.with_suffix(".spec.json")
    spec_file.write_text(json.dumps(spec), encoding="utf-8")
    done = subprocess.run(
        [python, str(ORACLES / "torchtitan_metrics_log.py"), str(spec_file), str(path)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return path
