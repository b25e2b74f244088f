"""MosaicML streaming runs with `remote: s3://...` (moto's server on 127.0.0.1) and an empty
`local`, filled as mosaicml-streaming 0.13.0's Stream fills it (dataloaders/mosaic/remote.py).

Oracle: the library itself, its Stream / StreamingDataset given the same remote and its own
empty local, downloading through its S3Downloader (endpoint from S3_ENDPOINT_URL,
streaming/base/storage/download.py:262)."""

from __future__ import annotations

import pytest

from dataloaders.errors import ConfigError
from dataloaders.run_config import config_from_dict
from dataloaders.storage import fetched
from forensics.replay import open_replayer
from forensics_testing.mds import write_mds
from forensics_testing.mosaic_support import run_oracle

SHARDS = {"web": [12] * 8, "code": [10] * 6}
ARGS = {"batch_size": 2, "shuffle": True, "shuffle_seed": 5, "shuffle_block_size": 20}


def _rows(name: str, n: int, uid0: int) -> list[dict]:
    return [{"text": f"{name} document {i}", "uid": uid0 + i} for i in range(n)]


@pytest.fixture
def streams(s3, tmp_path, monkeypatch):
    """Two MDS streams written on disk and uploaded under s3://<bucket>/mds/<name>/train."""
    monkeypatch.setenv("S3_ENDPOINT_URL", s3.endpoint)
    uid0 = {"web": 0, "code": 1000}
    for name, shards in SHARDS.items():
        folder = write_mds(tmp_path / "src" / name / "train", _rows(name, sum(shards), uid0[name]),
                           shards)  # fmt: skip
        s3.put_tree(folder, f"mds/{name}/train")
    return uid0


def _config(root, streams: list[dict], iters: int):
    data = {"format": "mosaic-streaming", "streams": streams, "split": "train", **ARGS}
    raw = {"data": data, "training": {"global_batch_size": 2, "train_iters": iters}}
    return config_from_dict(raw, base_dir=root, source=None)


def test_remote_streams_replay_what_streaming_downloads(s3, streams, tmp_path):
    remote = [{"remote": s3.url(f"mds/{n}"), "local": str(tmp_path / "ours" / n)} for n in SHARDS]
    spec = {
        "streams": [
            {"remote": s3.url(f"mds/{n}"), "local": str(tmp_path / "theirs" / n), "split": "train"}
            for n in SHARDS
        ],
        "dataset": ARGS,
        "num_workers": 0,
        "drop_last": True,
        "epochs": 1,
    }
    (theirs,) = run_oracle(spec, tmp_path / "oracle")
    batches = theirs["epochs"][0]
    fetched.reset()
    replayer = open_replayer(_config(tmp_path, remote, len(batches)))
    window = replayer.replay(3, 3, text=True, progress=False)
    got = [streams[ds] + doc for ds, doc in window.select("dataset", "doc_id").rows()]
    assert got == batches[2]  # iteration 3 is the library's third batch
    shards = [k for k in fetched.summary()["objects"] if k.endswith(".mds")]
    assert 0 < len(shards) <= 2 < sum(len(v) for v in SHARDS.values())  # only the window's
    assert all(k.endswith("index.json") or k in shards for k in fetched.summary()["objects"])
    full = replayer.replay(1, len(batches), text=True, progress=False)
    local = [{"local": str(tmp_path / "src" / n)} for n in SHARDS]
    want = open_replayer(_config(tmp_path, local, len(batches))).replay(
        1, len(batches), text=True, progress=False
    )
    differ = [c for c in full.columns if not full[c].equals(want[c])]
    assert differ == [], differ  # the same rows as the local copy's replay


def test_other_streaming_backends_are_refused(tmp_path):
    with pytest.raises(
        ConfigError, match=r"gs://b/web: a streaming remote is read from s3:// only"
    ):
        _config(tmp_path, [{"remote": "gs://b/web", "local": str(tmp_path / "w")}], 2)
