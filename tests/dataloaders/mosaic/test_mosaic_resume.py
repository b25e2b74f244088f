"""Restarts of streaming runs against mosaicml-streaming 0.13.0 itself (the oracle venv): a state
saved at the end of an epoch the world does not divide (the library's own state_dict, counting
the repeated samples), a restart onto another number of nodes (elastic resumption, relaxed
re-partition), and `replication`. Each real run is the library's StreamingDataset iterated by its
StreamingDataLoader on every simulated rank; several nodes run in their own mount namespaces
(forensics_testing/mosaic_support.py). Library source: mosaicml/streaming@89e7bb90,
dataset.py:691-814 and
:1475-1503, partition/__init__.py:56-60, partition/relaxed.py, world.py:117-148.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dataloaders.mosaic.order import World
from dataloaders.run_config import config_from_dict
from forensics.errors import ForensicsError
from forensics.replay import open_replayer
from forensics_testing.mosaic_support import run_library_functions, run_oracle, write_mds

STREAMS = {"web": (157, [40, 40, 40, 37]), "code": (90, [30, 30, 30])}  # 247 samples


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("mds")
    uid = 0
    for name, (n, shards) in STREAMS.items():
        rows = [{"text": f"{name} document {i}", "uid": uid + i} for i in range(n)]
        write_mds(folder / name, rows, shards)
        uid += n
    return folder


OFFSETS = {"web": 0, "code": 157}


def _expected(per_rank: list[dict[str, Any]], batch: int, first: int = 1) -> list:
    rows, it = [], first - 1
    for e in range(len(per_rank[0]["epochs"])):
        counts = {len(p["epochs"][e]) for p in per_rank}
        assert len(counts) == 1
        for b in range(counts.pop()):
            it += 1
            for r, p in enumerate(per_rank):
                rows += [(it, r * batch + j, u) for j, u in enumerate(p["epochs"][e][b])]
    return rows


def _ours(replayer: Any, iters: int) -> list:
    table = replayer.replay(1, iters)
    return [
        (it, pos, OFFSETS[ds] + doc)
        for it, pos, ds, doc in table.select("iteration", "position", "dataset", "doc_id").rows()
    ]


def _open(root: Path, data: dict[str, Any], gbs: int, iters: int) -> Any:
    raw = {
        "data": {"format": "mosaic-streaming", "streams": [{"local": "web"}, {"local": "code"}],
                 **data},
        "training": {"global_batch_size": gbs, "train_iters": iters},
    }  # fmt: skip
    return open_replayer(config_from_dict(raw, base_dir=root, source=None))


def _spec(root: Path, dataset: dict[str, Any], workers: int, epochs: int) -> dict[str, Any]:
    return {"streams": [{"local": str(root / n)} for n in STREAMS], "dataset": dataset,
            "num_workers": workers, "drop_last": False, "epochs": epochs}  # fmt: skip


@pytest.mark.parametrize(("nodes", "ranks", "ncn"), [(1, 3, 3), (3, 1, 1)])
def test_state_saved_at_a_padded_epoch_end(root: Path, tmp_path: Path, nodes, ranks, ncn):
    """247 samples over 3 ranks (one node of 3, or 3 nodes sharing 1 canonical node): the
    library pads the epoch to 249 and its state after the epoch says sample_in_epoch 249;
    resumed from it, the library yields nothing more of epoch 0 and then epochs 1 and 2 from
    their start. The replay, given that state, yields the same."""
    dataset = {"batch_size": 4, "shuffle": True, "num_canonical_nodes": ncn}
    spec = _spec(root, dataset, workers=2, epochs=1)
    first = run_oracle({**spec, "state_after_epochs": 1}, tmp_path / "first",
                       ranks_per_node=ranks, nodes=nodes)  # fmt: skip
    state = first[0]["state"]
    assert state["epoch"] == 0 and state["sample_in_epoch"] == 249  # > 247: the padding
    resumed = run_oracle({**spec, "epochs": 3, "resume_state": state}, tmp_path / "resumed",
                         ranks_per_node=ranks, nodes=nodes)  # fmt: skip
    assert all(p["epochs"][0] == [] for p in resumed)  # the resumed epoch 0 is empty
    n_first = len(first[0]["epochs"][0])
    expected = _expected(first, 4) + _expected(resumed, 4, first=n_first + 1)
    iters = expected[-1][0]
    data = {**dataset, "num_nodes": nodes, "ranks_per_node": ranks, "num_workers": 2,
            "resumes": [{"iteration": n_first + 1, "state": state}]}  # fmt: skip
    assert _ours(_open(root, data, 12, iters), iters) == expected

    # Further than the epoch plus its padding is refused, as the library refuses it.
    late = {**data, "resumes": [{"iteration": n_first + 1,
                                 "state": {**state, "sample_in_epoch": 250}}]}  # fmt: skip
    with pytest.raises(ForensicsError, match="sample_in_epoch 250 is beyond the epoch"):
        _open(root, late, 12, iters)


def test_elastic_resume_onto_more_nodes(root: Path, tmp_path: Path):
    """A run on 2 nodes (batch 6 per rank) stopped after 7 batches and resumed on 3 nodes
    (batch 4 per rank, the same global batch of 12): 3 nodes do not divide the 2 canonical
    nodes, so the library re-cuts the initial partition (relaxed), in the resumed epoch and the
    next. The replay yields the same.

    The DataLoader workers are persistent, as llm-foundry makes them: the state's
    initial_physical_nodes lives in the worker's copy of the dataset (set by _resume), so a
    fresh worker of the next epoch, forked from a main process that never read it, partitions
    with none and streaming raises (partition/orig.py:49-57): such a run stops there, and the replay
    describes the runs that went on."""
    dataset = {"batch_size": 6, "shuffle": True, "shuffle_algo": "py1br",
               "shuffle_block_size": 50, "num_canonical_nodes": 2}  # fmt: skip
    spec = {**_spec(root, dataset, workers=1, epochs=2), "persistent_workers": True}
    first = run_oracle({**spec, "stop_after": 7}, tmp_path / "first", ranks_per_node=1, nodes=2)
    state = first[0]["state"]
    assert state["initial_physical_nodes"] == 2 and state["sample_in_epoch"] == 7 * 12
    resumed_spec = {**spec, "dataset": {**dataset, "batch_size": 4}, "resume_state": state}
    resumed = run_oracle(resumed_spec, tmp_path / "resumed", ranks_per_node=1, nodes=3)
    expected = _expected(first, 6) + _expected(resumed, 4, first=8)
    iters = expected[-1][0]
    data = {
        **dataset,
        "num_nodes": 2,
        "num_workers": 1,
        "resumes": [{"iteration": 8, "state": state, "num_nodes": 3, "batch_size": 4}],
    }
    assert _ours(_open(root, data, 12, iters), iters) == expected

    # A restart that changes the global batch is refused in one line.
    grown = {**data, "resumes": [{"iteration": 8, "state": state, "num_nodes": 3}]}
    with pytest.raises(ForensicsError) as err:
        _open(root, grown, 12, iters)
    assert "batch_size 6 x 3 ranks is not the global batch 12" in str(err.value)


def test_replication_gives_consecutive_ranks_the_same_samples(root: Path, tmp_path: Path):
    """replication 2 over 4 ranks: ranks 0-1 and 2-3 get the same batches; the replay is the
    2-rank world of those pairs, each sample once per iteration (global batch 2 x 5)."""
    dataset = {"batch_size": 5, "shuffle": True, "replication": 2}
    per_rank = run_oracle(_spec(root, dataset, workers=2, epochs=2), tmp_path / "o",
                          ranks_per_node=4)  # fmt: skip
    assert per_rank[0]["epochs"] == per_rank[1]["epochs"]
    assert per_rank[2]["epochs"] == per_rank[3]["epochs"] != per_rank[0]["epochs"]
    expected = _expected([per_rank[0], per_rank[2]], 5)
    iters = expected[-1][0]
    data = {**dataset, "ranks_per_node": 4, "num_workers": 2}
    assert _ours(_open(root, data, 10, iters), iters) == expected


def test_replicated_world_is_the_librarys(tmp_path: Path):
    """World.replicate on several worlds: the nodes and ranks per node of the replicated world
    and where each original rank lands in it (its parallel rank is the replay's position)."""
    shapes = [(1, 4, 2, 2), (2, 4, 1, 2), (2, 4, 1, 4), (4, 8, 2, 2), (3, 2, 1, 3), (2, 3, 1, 2),
              (8, 8, 1, 16), (2, 2, 1, 3)]  # fmt: skip
    cases = [{"fn": "replicate", "nodes": n, "ranks": r, "workers": w, "r": rep}
             for n, r, w, rep in shapes]  # fmt: skip
    library = run_library_functions(cases, tmp_path)
    for (nodes, ranks, workers, rep), want in zip(shapes, library, strict=True):
        try:
            world = World(nodes, ranks, workers).replicate(rep)
        except ValueError:
            assert "error" in want, (nodes, ranks, rep)
            continue
        got = [
            [world.num_nodes, world.ranks_per_node, *divmod(rank // rep, world.ranks_per_node)]
            for rank in range(nodes * ranks)
        ]
        assert got == want["worlds"], (nodes, ranks, rep)
