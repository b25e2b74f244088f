"""Helpers for the MosaicML streaming tests: write small MDS streams, and run the real library
(mosaicml-streaming 0.13.0 in .venv-mosaic) as the oracle, one process per simulated rank."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from forensics_testing.mds import write_mds

__all__ = ["oracle_python", "run_library_functions", "run_oracle", "write_mds"]

ROOT = Path(__file__).resolve().parents[1]
ORACLES = ROOT / "tests" / "oracles"


def oracle_python() -> str:
    """The oracle venv's python (built on first use by scripts/mosaic_oracle_env.sh); skip the
    test with the reason when it cannot be built (no package index, no python3.11)."""
    try:
        done = subprocess.run(
            ["bash", str(ROOT / "scripts" / "mosaic_oracle_env.sh")],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=ROOT,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        pytest.skip(f"mosaicml-streaming oracle env not built: {err}")
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["?"]
        pytest.skip(f"mosaicml-streaming oracle env not built: {tail[0]}")
    return done.stdout.strip().splitlines()[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_oracle(
    spec: dict[str, Any], folder: Path, *, ranks_per_node: int = 1, nodes: int = 1
) -> list[dict[str, Any]]:
    """Run tests/oracles/mosaic_oracle.py: every rank of the world (one forked process each,
    RANK / WORLD_SIZE / LOCAL_WORLD_SIZE as torchrun sets them); per global rank, its output.
    Several nodes run as one process each under `unshare --mount` with a private /dev/shm and
    TMPDIR, since streaming keys its shared memory and file locks by node (two simulated nodes
    sharing /dev/shm would collide); the test is skipped where unshare is not allowed."""
    python = oracle_python()
    folder.mkdir(parents=True, exist_ok=True)
    spec = {**spec, "out": str(folder)}
    spec_path = folder / "spec.json"
    spec_path.write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["OMP_NUM_THREADS"] = "1"
    port = str(_free_port())
    command = [python, str(ORACLES / "mosaic_oracle.py"), str(spec_path), str(ranks_per_node), port]
    if nodes == 1:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"oracle failed:\n{(done.stdout + done.stderr)[-3000:]}"
    else:
        _run_nodes(command, nodes, folder, env)
    world = nodes * ranks_per_node
    return [json.loads((folder / f"rank{r}.json").read_text()) for r in range(world)]


def _run_nodes(command: list[str], nodes: int, folder: Path, env: dict[str, str]) -> None:
    """One oracle process per node, each in its own mount namespace (private /dev/shm)."""
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         "mount -t tmpfs tmpfs /dev/shm"],
        capture_output=True, text=True,
    )  # fmt: skip
    if probe.returncode != 0:
        pytest.skip(f"several simulated nodes need unshare --mount: {probe.stderr.strip()}")
    procs = []
    for node in range(nodes):
        tmp = folder / f"node{node}-tmp"
        tmp.mkdir(exist_ok=True)
        wrapped = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                   'mount -t tmpfs tmpfs /dev/shm && exec "$@"', "sh",
                   *command, str(node), str(nodes)]  # fmt: skip
        procs.append(
            subprocess.Popen(
                wrapped,
                env={**env, "TMPDIR": str(tmp)},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )  # fmt: skip
        )
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    for node, (proc, out) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == 0, f"oracle node {node} failed:\n{out[-3000:]}"


def run_library_functions(cases: list[dict[str, Any]], folder: Path) -> list[Any]:
    """Call streaming's own ordering functions (get_shuffle, get_partitions, get_sampling) on
    each case in the oracle venv; results as lists."""
    python = oracle_python()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "cases.json"
    path.write_text(json.dumps(cases))
    done = subprocess.run(
        [python, str(ORACLES / "mosaic_functions.py"), str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((folder / "results.json").read_text())
