"""MosaicML streaming configs: bad input is one line naming the file and the problem, the replay
needs neither torch nor the streaming library, and the vectorised DataLoader order agrees with
the plain per-worker loop it is written from (dataloaders/mosaic/order.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from dataloaders.mosaic.order import loader_batches, loader_steps
from dataloaders.run_config import load_config
from forensics.errors import ForensicsError
from forensics.replay import open_replayer
from forensics_testing.mosaic_support import write_mds
from forensics_testing.repo_paths import REPO_ROOT

ROOT = REPO_ROOT


def _run(folder: Path, gbs: int = 5, iters: int = 10, **data) -> Path:
    if not (folder / "web" / "index.json").exists():
        rows = [{"text": f"page {i}", "uid": i, "source": "web"} for i in range(50)]
        write_mds(folder / "web", rows, [20, 20, 10])
    config = {
        "data": {
            "format": "mosaic-streaming",
            "streams": [{"local": "web"}],
            "batch_size": 5,
            "shuffle": True,
            **data,
        },
        "training": {"global_batch_size": gbs, "train_iters": iters},
    }
    path = folder / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _error(path: Path) -> str:
    with pytest.raises(ForensicsError) as err:
        open_replayer(load_config(path))
    message = str(err.value)
    assert "\n" not in message
    return message


def test_missing_or_resized_shard_is_refused(tmp_path: Path):
    config = _run(tmp_path)
    shard = tmp_path / "web" / "shard.00001.mds"
    data = shard.read_bytes()
    shard.write_bytes(data + b"\0")
    message = _error(config)
    assert "shard.00001.mds: 609 bytes, but" in message and "index.json says 608" in message
    shard.unlink()
    assert "shard.00001.mds: shard missing" in _error(config)
    (tmp_path / "web" / "index.json").unlink()
    assert "index.json: not found" in _error(config)


def test_unsupported_settings_are_refused(tmp_path: Path):
    assert "py1b was removed" in _error(_run(tmp_path, shuffle_algo="py1b"))
    assert "batching_method 'stratified'" in _error(_run(tmp_path, batching_method="stratified"))
    assert "global_batch_size 5 !=" in _error(_run(tmp_path, ranks_per_node=2))
    assert "no column 'lang'" in _error(_run(tmp_path, provenance_fields=["lang"]))
    assert "streaming_version 0.9.1" in _error(_run(tmp_path, streaming_version="0.9.1"))


@pytest.mark.parametrize("partition_algo", ["orig", "relaxed"])
def test_canonical_nodes_that_do_not_divide_the_nodes_are_refused(tmp_path: Path, partition_algo):
    """3 canonical nodes on 2 nodes (2 x 1 rank x batch 5 = the global batch of 10, so the batch
    check passes and this refusal is the one that fires). streaming 0.13.0 refuses it on the
    first epoch under either algorithm: batching/random.py:57-60 calls get_partitions with
    initial_physical_nodes None on a first run, partition/relaxed.py:52-62 then hands over to
    get_partitions_orig, which raises at partition/orig.py:49-58 (the library's own refusal of
    these counts is compared in test_mosaic_order.py). 4 canonical nodes on the same 2 nodes run."""
    refused = _run(
        tmp_path, gbs=10, num_canonical_nodes=3, num_nodes=2, partition_algo=partition_algo
    )
    message = _error(refused)
    assert message.startswith(f"{refused}: num_canonical_nodes 3 and num_nodes 2: one must divide")
    fine = _run(tmp_path, gbs=10, num_canonical_nodes=4, num_nodes=2, partition_algo=partition_algo)
    assert open_replayer(load_config(fine)).plan.num_canonical_nodes == 4


def test_checkpoint_state_must_match_the_config(tmp_path: Path):
    state = {
        "epoch": 0,
        "sample_in_epoch": 20,
        "num_canonical_nodes": 1,
        "shuffle_seed": 9176,
        "initial_physical_nodes": 1,
    }
    (tmp_path / "state.json").write_text(json.dumps(state))
    ok = _run(tmp_path, resumes=[{"iteration": 5, "state_file": "state.json"}])
    replayer = open_replayer(load_config(ok))
    assert replayer.last_iteration == 10
    # Composer's dataset_state, the state under "train", reads the same
    (tmp_path / "state.json").write_text(json.dumps({"train": state, "eval": {}}))
    assert open_replayer(load_config(ok)).resume_states == replayer.resume_states
    (tmp_path / "state.json").write_text(json.dumps({**state, "shuffle_seed": 7}))
    assert "checkpoint's shuffle_seed is 7, the config says 9176" in _error(ok)
    (tmp_path / "state.json").write_text(json.dumps({**state, "num_canonical_nodes": 2}))
    assert "checkpoint's num_canonical_nodes is 2, the config gives 1" in _error(ok)
    (tmp_path / "state.json").write_text(json.dumps({**state, "initial_physical_nodes": 2}))
    assert "started on 2 nodes and the config gives 1" in _error(ok)
    (tmp_path / "state.json").write_text("{not json")
    assert "state.json: not a StreamingDataset state_dict" in _error(ok)


def test_replay_cli_error_is_one_red_line(tmp_path: Path):
    config = _run(tmp_path)
    (tmp_path / "web" / "shard.00002.mds").unlink()
    done = subprocess.run(
        [sys.executable, "-m", "forensics.cli", "replay", "--config", str(config), "--step", "3",
         "--window", "2", "--out", str(tmp_path / "w.parquet")],
        capture_output=True, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin"},
    )  # fmt: skip
    assert done.returncode == 2
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and "shard.00002.mds: shard missing" in lines[0], lines
    assert not (tmp_path / "w.parquet").exists()


def test_replay_imports_neither_torch_nor_streaming(tmp_path: Path):
    config = _run(tmp_path, num_workers=2)
    code = (
        "import sys; from dataloaders.run_config import load_config; "
        "from forensics.replay import open_replayer; "
        f"r = open_replayer(load_config({str(config)!r})); t = r.replay(1, 10, text=True); "
        "assert t.height == 50 and t['text'].null_count() == 0; "
        "bad = [m for m in ('torch', 'streaming', 'transformers') if m in sys.modules]; "
        "assert not bad, bad"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("drop_last", [False, True])
def test_vectorised_loader_order_equals_the_worker_loop(drop_last: bool):
    rng = np.random.default_rng(1)
    for _ in range(30):
        nodes, ranks, workers, per, batch = (int(x) for x in rng.integers(1, 5, 5))
        ids = rng.permutation(nodes * ranks * workers * per * batch).astype(np.int64)
        ids = ids.reshape(nodes, ranks, workers, per, batch)
        ids[ids >= int(ids.size * rng.uniform(0.5, 1.0))] = -1  # padding, anywhere
        got_batch, got_pos, got_sample = loader_steps(ids, batch, drop_last)
        loops = [
            loader_batches(ids[n, r], batch, drop_last) for n in range(nodes) for r in range(ranks)
        ]
        n_iters = min(len(b) for b in loops)
        want = sorted(
            (i, r * batch + j, int(s))
            for r, batches in enumerate(loops)
            for i, b in enumerate(batches[:n_iters])
            for j, s in enumerate(b)
        )
        got = list(zip(got_batch.tolist(), got_pos.tolist(), got_sample.tolist(), strict=True))
        assert got == want


def test_second_replay_comes_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    config = _run(tmp_path, num_workers=1)
    first = open_replayer(load_config(config)).replay(1, 10)

    def no_rebuild(*args, **kwargs):
        raise AssertionError("rebuilt instead of read from the cache")

    from dataloaders.mosaic.replayer import MosaicReplayer

    monkeypatch.setattr(MosaicReplayer, "_build_segment", no_rebuild)
    monkeypatch.setattr(MosaicReplayer, "_build_segments", no_rebuild)
    again = open_replayer(load_config(config)).replay(1, 10)
    assert again.equals(first)


def test_example_config_is_valid():
    config = load_config(ROOT / "configs" / "example-mosaic.yaml")
    assert config.data.format == "mosaic-streaming"
    assert config.training.global_batch_size == config.data.global_batch_size


def test_replay_command_and_iteration_samples_agree(tmp_path: Path):
    """`forensics replay` writes the replayer's table; iteration_samples' half-open ranges hold
    exactly the rows of each iteration (the epoch's short last batch included)."""
    import polars as pl
    from typer.testing import CliRunner

    from forensics.cli import app

    config = _run(tmp_path, num_workers=3, batch_size=4, gbs=4, iters=20, drop_last=False)
    out = tmp_path / "window.parquet"
    result = CliRunner().invoke(
        app,
        ["replay", "--config", str(config), "--step", "20", "--window", "20", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    replayer = open_replayer(load_config(config))
    table = replayer.replay(1, 20)
    written = pl.read_parquet(out)
    assert written.select(table.columns).equals(table)
    spans = replayer.iteration_samples(1, 20)
    counts = table.group_by("iteration").len().sort("iteration")["len"].to_list()
    assert (spans["end_sample"] - spans["first_sample"]).to_list() == counts
    assert 2 in counts  # 50 samples in batches of 4 across 3 workers: a short batch of 2
    starts = table.group_by("iteration").agg(pl.col("sample_index").min()).sort("iteration")
    assert starts["sample_index"].to_list() == spans["first_sample"].to_list()
