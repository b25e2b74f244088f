"""Restart plans that hold across data stages, and inputs that look right but are not.

A rebuild whose rollback lies in the stage before the culprit's is a sequence of launches (one
--data-path per Megatron launch). The launches are replayed here with megatron-core itself: each
flags file split as the shell splits `$(cat FILE)`, its --data-path built into a BlendedDataset
by megatron-core's builder, the consumed-samples count carried from one launch to the next as a
relaunch from the saved checkpoint does.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from refusal import one_line_error
from stage_runs import GBS, ITERS, ROLLBACK, SEED, SEQ, SPLIT, build_staged_run, edit_skip

from dataloaders.config import load_config
from forensics.errors import ForensicsError
from forensics.rebuild import run_rebuild
from forensics.replay import open_replayer


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "forensics.cli", *args], capture_output=True, text=True, cwd=cwd
    )


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("staged")
    run = build_staged_run(root)
    result = run_rebuild(run["skip"], load_config(run["config"]), root / "rebuild")
    return run | {"result": result, "out": root / "rebuild"}


def parse_launch(path: Path) -> dict:
    """A flags file as Megatron's argparse would see it after `$(cat FILE)`: the blend, the
    checkpoint it loads (--ckpt-step) and the iteration it exits at (--exit-interval)."""
    argv = shlex.split(path.read_text())
    at = argv.index("--data-path")
    values = []
    for word in argv[at + 1 :]:
        if word.startswith("--"):
            break
        values.append(word)
    flag = {
        argv[i]: argv[i + 1] for i, w in enumerate(argv) if w in ("--ckpt-step", "--exit-interval")
    }
    return {
        "weights": [float(w) for w in values[0::2]],
        "prefixes": values[1::2],
        "load": int(flag["--ckpt-step"]),
        "exit": int(flag["--exit-interval"]) if "--exit-interval" in flag else None,
    }


def original_doc(prefix: str, doc: int, sources: dict[str, str]) -> tuple[str, int]:
    """(original dataset prefix, its doc_id) of document `doc` of `prefix` (a rebuilt copy maps
    back through its manifest)."""
    manifest = Path(f"{prefix}.manifest.parquet")
    if prefix in sources:
        ids = pl.read_parquet(manifest)["original_doc_id"].cast(pl.Int64).to_list()
        return sources[prefix], ids[doc]
    return prefix, doc


def test_rebuild_plan_is_every_launch_and_megatron_core_replays_it(
    staged: dict, megatron_build
) -> None:
    out, summary = staged["out"], json.loads((staged["out"] / "rebuild.json").read_text())
    files = [launch["file"] for launch in summary["launches"]]
    assert files == ["restart-rebuilt.flags", "restart-rebuilt-from-31.flags"], files
    sources = {row["rebuilt"]: row["source"] for row in summary["datasets"].values()}
    blocked = {
        str(staged["root"] / "data" / name / "web_text_document"): set(ids)
        for name, ids in staged["blocked"].items()
    }
    original = open_replayer(load_config(staged["config"]))
    planned = open_replayer(load_config(out / "rebuilt.yaml"))
    consumed, iteration, checked = ROLLBACK * GBS, ROLLBACK + 1, 0
    for file in files:
        launch = parse_launch(out / file)
        assert launch["load"] == iteration - 1  # the checkpoint the launch before it saved
        (blend, _, _) = megatron_build(
            launch["prefixes"], launch["weights"], [ITERS * GBS, 0, 0],
            seed=SEED, seq_length=SEQ, split=SPLIT,
        )  # fmt: skip
        last = launch["exit"] or ITERS
        table = planned.replay(iteration, last, text=False, progress=False)
        before = original.replay(iteration, last, text=False, progress=False)
        for it in range(iteration, last + 1):
            for pos in range(GBS):
                k, m = int(blend.dataset_index[consumed]), int(blend.dataset_sample_index[consumed])
                tokens, docs = blend.datasets[k]._query_document_sample_shuffle_indices(m)
                prefix = launch["prefixes"][k]
                for doc in docs:
                    source, old = original_doc(prefix, int(doc), sources)
                    assert old not in blocked.get(source, set()), (it, pos, source, old)
                for reference, name in ((table, "planned"), (before, "original")):
                    if name == "original" and file != files[0]:
                        continue  # the first launch's blend is unchanged: the original order
                    rows = reference.filter(
                        (pl.col("iteration") == it) & (pl.col("position") == pos)
                    )
                    replayer = planned if name == "planned" else original
                    mine = np.concatenate([
                        np.asarray(replayer._doc_tokens(n, d, a, b), dtype=np.int64)
                        for n, d, a, b in rows.select(
                            "dataset", "doc_id", "token_start", "token_end"
                        ).rows()
                    ])  # fmt: skip
                    np.testing.assert_array_equal(mine, tokens, err_msg=f"{name} {it}/{pos}")
                consumed += 1
                checked += 1
        iteration = last + 1
    assert iteration == ITERS + 1 and checked == (ITERS - ROLLBACK) * GBS


def test_rebuild_says_which_iterations_keep_their_order(staged: dict) -> None:
    summary = json.loads((staged["out"] / "rebuild.json").read_text())
    md = (staged["out"] / "rebuild.md").read_text()
    assert summary["notes"][0].startswith("The data order changes from iteration 31 on")
    assert "Iterations 21-30 keep the original run's batches" in summary["notes"][1]
    assert "every batch of the restart differs" not in md
    first, second = summary["launches"]
    assert (first["last_iteration"], first["order_changes"]) == (30, False)
    assert (second["first_iteration"], second["order_changes"]) == (31, True)
    assert "--exit-interval 30" in md and "restart-rebuilt-from-31.flags" in md
    assert (staged["out"] / "data_path-from-31.txt").read_text() in (
        staged["out"] / "restart-rebuilt-from-31.flags"
    ).read_text()


def test_rebuild_terminal_shows_every_launch(staged: dict, tmp_path: Path) -> None:
    proc = cli(
        "rebuild", str(staged["skip"]), "--config", str(staged["config"]), "--out",
        str(tmp_path / "o"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "launch 2, iterations 31-: loads checkpoint 30" in proc.stdout, proc.stdout
    assert "--exit-interval 30" in proc.stdout and "restart-rebuilt-from-31.flags" in proc.stdout
