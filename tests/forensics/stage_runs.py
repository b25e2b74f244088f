"""A small Megatron run with two data stages, written with the .bin/.idx writer, and a skip.json
for it whose block list lies in a dataset of the later stage (the rollback in the earlier one):
the shape of a dirty crawl batch that enters with a stage switch.

The skip file is built with forensics.skip's own plan (flags, fingerprint), as `forensics spike`
writes it, without the slow scoring: the tests here are about what the rebuild and check-skip
do with it, not about how the documents were blamed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from dataloaders.megatron.indexed import IndexedDatasetWriter
from dataloaders.run_config import load_config
from dataloaders.schedule import Schedule
from dataloaders.trainers import get_trainer
from forensics.replay import open_replayer
from forensics.skip import json_fingerprint
from forensics.skip.plan import SkipPlan, plan_flags

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The CLI of this checkout (PYTHONPATH: another working directory must not pick up an
    installed copy)."""
    env = os.environ | {"PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "forensics.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
    )


GBS, SEQ, ITERS, SWITCH, STEP, ROLLBACK = 8, 32, 60, 31, 36, 20
SPLIT = "90,8,2"
SEED = 11


def write_prefix(prefix: Path, rng: np.random.Generator, docs: int) -> None:
    """`docs` documents of random tokens (5-60 each) as a uint16 .bin/.idx pair."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with IndexedDatasetWriter(prefix, np.uint16) as writer:
        for _ in range(docs):
            n = int(rng.integers(5, 61))
            writer.add_document(rng.integers(0, 60000, size=n).astype(np.uint16), [n])


def build_staged_run(root: Path, *, crawl_dirs: tuple[str, ...] = ("crawl",)) -> dict[str, Any]:
    """The run in `root`: web + code, then from iteration SWITCH web + one crawl dataset per
    entry of `crawl_dirs` (each `data/<dir>/web_text_document`: one file name, other folders).
    Returns the config path, skip.json path and the block list."""
    rng = np.random.default_rng(5)
    write_prefix(root / "data" / "web", rng, 160)
    write_prefix(root / "data" / "code", rng, 120)
    crawls = []
    for d in crawl_dirs:
        write_prefix(root / "data" / d / "web_text_document", rng, 90)
        crawls.append({"prefix": f"data/{d}/web_text_document", "name": d, "weight": 0.5})
    config = {
        "name": "staged",
        "data": {
            "format": "megatron",
            "seed": SEED,
            "seq_length": SEQ,
            "split": SPLIT,
            "stages": [
                {
                    "start_iteration": 1,
                    "blend": [
                        {"prefix": "data/web", "name": "web", "weight": 0.6},
                        {"prefix": "data/code", "name": "code", "weight": 0.4},
                    ],
                },
                {
                    "start_iteration": SWITCH,
                    "blend": [{"prefix": "data/web", "name": "web", "weight": 0.5}, *crawls],
                },
            ],
        },
        "training": {"global_batch_size": GBS, "train_iters": ITERS},
        "checkpoints": [10, 20, 30, 40, 50],
    }
    path = root / "forensics.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    blocked = {
        d: sorted(int(i) for i in rng.choice(80, size=25, replace=False)) for d in crawl_dirs
    }
    skip = write_skip(path, root / f"spike-{STEP}", blocked)
    return {"config": path, "skip": skip, "blocked": blocked, "root": root}


def write_skip(config: Path, out: Path, blocked: dict[str, list[int]]) -> Path:
    """skip.json for a spike at STEP rolled back to ROLLBACK with block list `blocked`, no
    iteration skipped (the block list is the rebuild's business)."""
    run = load_config(config)
    replayer = open_replayer(run)
    schedule = Schedule(run.training, [s.start_iteration for s in run.data.data_stages])
    ranges, composed, _, flags = plan_flags(
        get_trainer(run.training.trainer), [], schedule, ROLLBACK
    )
    plan = SkipPlan(
        step=STEP,
        window=[STEP - 10, STEP],
        rollback={
            "iteration": ROLLBACK,
            "checkpoint": True,
            "rule": "window",
            "note": "",
            "resume_iteration": ROLLBACK + 1,
        },
        scope=[STEP - 10, STEP],
        threshold=0.5,
        trainer=run.training.trainer,
        iterations=[list(r) for r in ranges],
        samples=[],
        documents=blocked,
        culprit_clusters=["crawl"],
        documents_seen_in_window=sum(len(v) for v in blocked.values()),
        documents_flagged=blocked,
        flags=flags,
        collateral={},
        ahead={},
        fingerprint=json_fingerprint(replayer),
        composed=composed,
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "skip.json").write_text(plan.to_json())
    return out / "skip.json"


def edit_skip(skip_file: Path, out: Path, **changes: Any) -> Path:
    """A copy of skip.json with top-level keys replaced (`rollback` merged), as a hand edit."""
    data = json.loads(skip_file.read_text())
    if "rollback" in changes:
        data["rollback"] = data["rollback"] | changes.pop("rollback")
    data |= changes
    out.mkdir(parents=True, exist_ok=True)
    (out / "skip.json").write_text(json.dumps(data))
    return out / "skip.json"
