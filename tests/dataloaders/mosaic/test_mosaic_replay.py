"""Replay of MosaicML streaming runs against the real library: for each configuration the real
StreamingDataset (mosaicml-streaming 0.13.0, in the oracle venv built by
scripts/mosaic_oracle_env.sh) is iterated by its StreamingDataLoader (a torch DataLoader) on every
simulated rank (one process per rank, RANK / WORLD_SIZE / LOCAL_WORLD_SIZE as torchrun sets them)
for two epochs, and every sample of every iteration must be the one our replay puts at that
iteration and position.

Ranks are simulated on one node: two simulated nodes on one machine collide in streaming's
shared-memory registry (both local leaders create /000NNN_locals), so multi-node partitions are
checked function by function in test_mosaic_order.py instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

from dataloaders.run_config import config_from_dict
from forensics.errors import ForensicsError
from forensics.replay import open_replayer
from forensics_testing.mosaic_support import run_oracle, write_mds

# Three streams: (samples, shard sizes). uid = offset over streams + index in the stream.
STREAMS = {"web": (157, [40, 40, 40, 37]), "code": (90, [30, 30, 30]), "books": (61, [25, 36])}


@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("mds")
    offsets, uid = {}, 0
    for name, (n, shards) in STREAMS.items():
        rows = [
            {"text": f"{name} document {i}", "uid": uid + i, "source": f"{name}-{i % 3}"}
            for i in range(n)
        ]
        write_mds(root / name, rows, shards)
        offsets[name] = uid
        uid += n
    return {"root": root, "offsets": offsets}


def _config(root: Path, data: dict[str, Any], gbs: int, iters: int) -> Any:
    raw = {
        "data": {"format": "mosaic-streaming", "provenance_fields": ["source"], **data},
        "training": {"global_batch_size": gbs, "train_iters": iters},
    }
    return config_from_dict(raw, base_dir=root, source=None)


def _expected(per_rank: list[dict[str, Any]], batch: int, first_iteration: int = 1) -> list:
    """(iteration, position, uid) of every sample the real loaders yielded: iteration i takes
    the i-th batch of every rank, epochs back to back; rank r's j-th sample is at r * batch + j."""
    rows, it = [], first_iteration - 1
    for e in range(len(per_rank[0]["epochs"])):
        counts = {len(p["epochs"][e]) for p in per_rank}
        assert len(counts) == 1, "every rank yields the same number of batches"
        for b in range(counts.pop()):
            it += 1
            for r, p in enumerate(per_rank):
                rows += [(it, r * batch + j, u) for j, u in enumerate(p["epochs"][e][b])]
    return rows


def _ours(table: pl.DataFrame, offsets: dict[str, int]) -> list:
    uid = pl.col("doc_id") + pl.col("dataset").replace_strict(offsets, return_dtype=pl.Int64)
    return list(table.select("iteration", "position", uid.alias("uid")).iter_rows())


CASES = {
    # name: (streams with weights, StreamingDataset args, ranks, workers, drop_last)
    "py1e-proportion-1rank-0workers": (
        {"web": {"proportion": 0.7}, "code": {"proportion": 0.3}},
        {"shuffle": True, "epoch_size": 230, "num_canonical_nodes": 1, "shuffle_block_size": 50},
        1, 0, False,
    ),
    "py1br-repeat-choose-2ranks-3workers-droplast": (
        {"web": {"repeat": 0.5}, "code": {"choose": 130}, "books": {}},
        {"shuffle": True, "shuffle_algo": "py1br", "num_canonical_nodes": 2,
         "shuffle_block_size": 40, "shuffle_seed": 17},
        2, 3, True,
    ),
    "py2s-default-ncn-4ranks-1worker": (
        {"web": {}, "books": {}},
        {"shuffle": True, "shuffle_algo": "py2s", "batch_size": 3},
        4, 1, False,
    ),
    "naive-fixed-sampling-3ranks-2workers": (
        {"code": {"proportion": 2.0}, "books": {"proportion": 1.0}},
        {"shuffle": True, "shuffle_algo": "naive", "sampling_method": "fixed",
         "partition_algo": "orig", "epoch_size": 200},
        3, 2, False,
    ),
    "no-shuffle-epoch-size-unweighted-2ranks-2workers": (
        {"web": {}, "code": {}},
        {"shuffle": False, "shuffle_algo": "py1s", "num_canonical_nodes": 4,
         "epoch_size": 200, "sampling_granularity": 3},
        2, 2, False,
    ),
    "py1s-choose-1rank-1worker": (
        {"web": {"choose": 100}, "books": {"repeat": 1.5}},
        {"shuffle": True, "shuffle_algo": "py1s", "num_canonical_nodes": 3, "batch_size": 5},
        1, 1, False,
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_replay_matches_streaming_dataloader(case: str, streams: dict[str, Any], tmp_path: Path):
    weights, args, ranks, workers, drop_last = CASES[case]
    args = {"batch_size": 4, **args}
    root = streams["root"]
    spec = {
        "streams": [{"local": str(root / name), **w} for name, w in weights.items()],
        "dataset": args,
        "num_workers": workers,
        "drop_last": drop_last,
        "epochs": 2,
    }
    per_rank = run_oracle(spec, tmp_path / "oracle", ranks_per_node=ranks)
    expected = _expected(per_rank, args["batch_size"])
    iters = expected[-1][0]
    data = {
        "streams": [{"local": name, **w} for name, w in weights.items()],
        **args,
        "ranks_per_node": ranks,
        "num_workers": workers,
        "drop_last": drop_last,
    }
    replayer = open_replayer(_config(root, data, args["batch_size"] * ranks, iters))
    assert replayer.last_iteration == iters
    table = replayer.replay(1, iters, text=True)
    assert _ours(table, streams["offsets"]) == expected
    # sample_index counts consumed samples; the text and provenance are the sample's own.
    assert table["sample_index"].to_list() == list(range(table.height))
    row = table.row(0, named=True)
    assert row["text"] == f"{row['dataset']} document {row['doc_id']}"
    assert row["source"] == f"{row['dataset']}-{row['doc_id'] % 3}"
    # A window in the second epoch is the same rows as the whole-run table.
    window = replayer.replay(iters - 3, iters)
    assert _ours(window, streams["offsets"]) == [r for r in expected if r[0] >= iters - 3]


def test_resume_from_state_dict_matches_streaming(streams: dict[str, Any], tmp_path: Path):
    """A run stopped after 9 batches of epoch 0, its StreamingDataLoader.state_dict() taken, and
    a new run resumed from it (load_state_dict) for two epochs: our replay, given that state in
    data.resumes, yields what both real runs yielded, iteration by iteration."""
    root = streams["root"]
    weights = {"web": {"proportion": 0.6}, "code": {"proportion": 0.4}}
    args = {"batch_size": 4, "shuffle": True, "num_canonical_nodes": 2, "shuffle_block_size": 60}
    spec = {
        "streams": [{"local": str(root / name), **w} for name, w in weights.items()],
        "dataset": args,
        "num_workers": 2,
        "drop_last": False,
        "epochs": 2,
    }
    first = run_oracle({**spec, "stop_after": 9}, tmp_path / "first", ranks_per_node=2)
    state = first[0]["state"]
    assert state["epoch"] == 0 and state["sample_in_epoch"] == 9 * 4 * 2
    resumed = run_oracle({**spec, "resume_state": state}, tmp_path / "resumed", ranks_per_node=2)
    expected = _expected(first, 4) + _expected(resumed, 4, first_iteration=10)
    iters = expected[-1][0]
    data = {
        "streams": [{"local": name, **w} for name, w in weights.items()],
        **args,
        "ranks_per_node": 2,
        "num_workers": 2,
        "resumes": [{"iteration": 10, "state": state}],
    }
    replayer = open_replayer(_config(root, data, 8, iters))
    assert _ours(replayer.replay(1, iters), streams["offsets"]) == expected

    # The same state with another seed or canonical-node count is refused, not replayed.
    for key, value in (("shuffle_seed", 1), ("num_canonical_nodes", 4)):
        bad = {**data, "resumes": [{"iteration": 10, "state": {**state, key: value}}]}
        with pytest.raises(ForensicsError, match=key):
            open_replayer(_config(root, bad, 8, iters))
