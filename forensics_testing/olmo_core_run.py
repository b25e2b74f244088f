"""Helpers for the OLMo-core tests: generate token files, write a run config, and run the real
library (ai2-olmo-core in .venv-olmo, built by scripts/olmo_oracle_env.sh) in a subprocess."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ORACLE_PY = ROOT / ".venv-olmo" / "bin" / "python"
ORACLE_SCRIPT = ROOT / "tests" / "oracles" / "olmo_core_loader.py"
EOS, PAD, VOCAB = 0, 1, 1000


def oracle_python() -> Path:
    """The interpreter that has ai2-olmo-core (built once; skips when it cannot be built)."""
    if not ORACLE_PY.exists():
        proc = subprocess.run(
            ["bash", str(ROOT / "scripts" / "olmo_oracle_env.sh"), sys.executable],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0 or not ORACLE_PY.exists():
            pytest.skip(f"cannot build the OLMo-core oracle env: {proc.stderr[-300:]}")
    return ORACLE_PY


def write_documents(
    path: Path, docs: list[np.ndarray], *, metadata: list[list[str]] | None = None
) -> None:
    """A Dolma-style token file (raw uint16, each document EOS-terminated) and, when given,
    its `.csv.gz` metadata rows `start,end,<fields>`."""
    tokens = np.concatenate([np.append(d, EOS) for d in docs]).astype(np.uint16)
    tokens.tofile(path)
    if metadata is not None:
        ends = np.cumsum([len(d) + 1 for d in docs])
        starts = ends - np.asarray([len(d) + 1 for d in docs])
        rows = [
            ",".join([str(a), str(b), *fields])
            for a, b, fields in zip(starts, ends, metadata, strict=True)
        ]
        with gzip.open(path.with_name(path.name.replace(".npy", ".csv.gz")), "wt") as handle:
            handle.write("\n".join(rows) + "\n")


def random_docs(rng: np.random.Generator, n: int, lo: int = 3, hi: int = 90) -> list[np.ndarray]:
    """Documents of random non-special tokens."""
    return [rng.integers(2, VOCAB, size=int(k)) for k in rng.integers(lo, hi, size=n)]


def run_oracle(jobs: list[dict[str, Any]], folder: Path) -> list[dict[str, Any]]:
    """Iterate the real OLMo-core loader for every job, in one interpreter (importing torch and
    olmo_core once); see tests/oracles/olmo_core_loader.py."""
    spec_path = folder / "oracle-jobs.json"
    out_path = folder / "oracle-out.json"
    spec_path.write_text(json.dumps({"jobs": jobs}))
    proc = subprocess.run(
        [str(oracle_python()), str(ORACLE_SCRIPT), str(spec_path), str(out_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out_path.read_text())["results"]


def config_dict(
    sources: dict[str, list[str]],
    *,
    seq: int,
    ipb: int,
    seed: int,
    world: int = 1,
    train_iters: int,
    **data: Any,
) -> dict[str, Any]:
    """A `format: olmo-core` run config (paths relative to the config file)."""
    return {
        "name": "olmo-test",
        "data": {
            "format": "olmo-core",
            "sources": [{"name": n, "paths": p} for n, p in sources.items()],
            "sequence_length": seq,
            "dtype": "uint16",
            "eos_token_id": EOS,
            "pad_token_id": PAD,
            "vocab_size": VOCAB,
            "global_batch_size": ipb * seq,
            "seed": seed,
            "dp_world_size": world,
            **data,
        },
        "training": {"global_batch_size": ipb, "train_iters": train_iters},
    }


def write_config(folder: Path, config: dict[str, Any], name: str = "run.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(config))
    return path


def oracle_spec(config: dict[str, Any], folder: Path, **extra: Any) -> dict[str, Any]:
    """The oracle's spec for the same run (the library's own parameter names)."""
    data = config["data"]
    paths = [str(folder / p) for s in data["sources"] for p in s["paths"]]
    return {
        "paths": paths,
        "sequence_length": data["sequence_length"],
        "max_target_sequence_length": data.get("max_target_sequence_length"),
        "pad_token_id": data["pad_token_id"],
        "eos_token_id": data["eos_token_id"],
        "bos_token_id": data.get("bos_token_id"),
        "vocab_size": data["vocab_size"],
        "dtype": data["dtype"],
        "global_batch_size": data["global_batch_size"],
        "seed": data["seed"],
        "world_size": data.get("dp_world_size", 1),
        "work_dir": str(folder / config["data"].get("work_dir", "olmo-work")),
        "instance_filter": data.get("instance_filter"),
        "max_steps": config["training"]["train_iters"],
        **extra,
    }


def oracle_positions(out: dict[str, Any]) -> dict[int, list[int]]:
    """step -> global instance index at each global position (rank r's j-th at r * per + j)."""
    by_step: dict[int, list[int]] = {}
    for rank in out["ranks"]:
        for step in rank["steps"]:
            by_step.setdefault(step["step"], []).extend(step["index"])
    return by_step
