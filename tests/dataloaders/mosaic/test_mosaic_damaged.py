"""A damaged MDS stream is one line naming the file and the field, never an internal error or
other samples' bytes read as text: an index.json whose counts are not counts, a shard whose
offsets table is not the one MDSWriter writes (mosaicml-streaming 0.13
streaming/base/format/mds/writer.py:139-144), a sample whose column sizes run past its end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from dataloaders.run_config import load_config
from forensics.errors import ForensicsError
from forensics.replay import open_replayer
from forensics_testing.mosaic_support import write_mds


def _run(folder: Path) -> Path:
    rows = [{"text": f"page {i}", "uid": i, "source": "web"} for i in range(50)]
    write_mds(folder / "web", rows, [20, 20, 10])
    config = {
        "data": {"format": "mosaic-streaming", "streams": [{"local": "web"}], "batch_size": 5},
        "training": {"global_batch_size": 5, "train_iters": 10},
    }
    (folder / "run.yaml").write_text(yaml.safe_dump(config))
    return folder / "run.yaml"


def _refused(config: Path, *needles: str) -> None:
    with pytest.raises(ForensicsError) as err:
        open_replayer(load_config(config)).replay(1, 10, text=True, progress=False)
    message = str(err.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message


@pytest.mark.parametrize(
    ("field", "value"),
    [("samples", -20), ("samples", "20"), ("samples", True), ("bytes", -1), ("bytes", 1.5)],
)
def test_an_index_whose_counts_are_not_counts_is_refused(tmp_path: Path, field, value) -> None:
    config = _run(tmp_path)
    index = tmp_path / "web" / "index.json"
    data = json.loads(index.read_text())
    (data["shards"][1]["raw_data"] if field == "bytes" else data["shards"][1])[field] = value
    index.write_text(json.dumps(data))
    name = "raw_data.bytes" if field == "bytes" else field
    _refused(config, str(index), f"shard 1: {name} is {value!r}, not a count")


def _poke_offsets(shard: Path, table) -> None:
    data = bytearray(shard.read_bytes())
    n = int(np.frombuffer(bytes(data[:4]), "<u4")[0])
    data[4 : 4 + 4 * (n + 1)] = np.asarray(table(n, len(data)), dtype="<u4").tobytes()
    shard.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "table",
    [
        lambda n, size: np.random.default_rng(0).integers(0, 2**32, n + 1),  # random
        lambda n, size: np.random.default_rng(1).integers(0, size, n + 1),  # random, in the file
        lambda n, size: np.linspace(4 * (n + 2), size, n + 1)[::-1],  # reversed
        lambda n, size: np.linspace(4 * (n + 2), size - 8, n + 1),  # short of the end
    ],
    ids=["random", "random-within", "reversed", "short"],
)
def test_a_shard_whose_offsets_table_is_damaged_is_refused(tmp_path: Path, table) -> None:
    config = _run(tmp_path)
    shard = tmp_path / "web" / "shard.00001.mds"
    _poke_offsets(shard, table)
    _refused(config, str(shard), "offsets table is not MDS's")


def test_a_sample_whose_sizes_run_past_its_end_is_refused(tmp_path: Path) -> None:
    """The table intact, one sample's size prefix too large: it would read the next sample."""
    config = _run(tmp_path)
    shard = tmp_path / "web" / "shard.00000.mds"
    data = bytearray(shard.read_bytes())
    n = int(np.frombuffer(bytes(data[:4]), "<u4")[0])
    offsets = np.frombuffer(bytes(data[4 : 4 + 4 * (n + 1)]), "<u4")
    for row in range(n):  # every sample's first size prefix: one of them will be drawn
        at = int(offsets[row])
        data[at : at + 4] = np.uint32(200).tobytes()
    shard.write_bytes(bytes(data))
    _refused(config, str(shard), "column sizes run past its end")
