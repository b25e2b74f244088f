"""Hugging Face `datasets` runs whose `data_files` are `s3://` URLs on moto's server, read
through fsspec (s3fs) with the run's `storage_options`, as `datasets` reads them
(dataloaders/hf/remote.py). Oracle: `datasets.load_dataset(..., storage_options=...)` itself,
streaming the same URLs from the same endpoint."""

from __future__ import annotations

import yaml

from dataloaders.run_config import load_config
from dataloaders.storage import fetched
from forensics.replay import open_replayer
from forensics_testing.file_runs import build_hf_run

SECRET = "testing-secret-key"


def test_remote_data_files_replay_what_datasets_streams(s3, tmp_path):
    import datasets
    from datasets.distributed import split_dataset_by_node

    local_config, per_rank = build_hf_run(tmp_path)
    raw = yaml.safe_load(local_config.read_text())
    urls = [s3.put(tmp_path / name, f"hf/{name}") for name in raw["data"]["files"]]
    options = {"key": "testing-key-id", "secret": SECRET,
               "client_kwargs": {"endpoint_url": s3.endpoint}}  # fmt: skip
    raw["data"]["files"] = urls
    raw["data"]["storage_options"] = options
    remote_config = tmp_path / "remote.yaml"
    remote_config.write_text(yaml.safe_dump(raw))
    data = raw["data"]
    ds = datasets.load_dataset(
        "parquet", data_files=urls, split="train", streaming=True, storage_options=options
    )
    ds = ds.shuffle(seed=data["seed"], buffer_size=data["buffer_size"], max_buffer_input_shards=1)
    uids = [ex["uid"] for ex in split_dataset_by_node(ds, rank=0, world_size=data["world_size"])]
    size = data["per_device_batch_size"]
    assert [uids[i : i + size] for i in range(0, len(uids), size)] == per_rank[0]
    fetched.reset()
    config = load_config(remote_config)
    assert SECRET not in config.model_dump_json() and SECRET not in repr(config)
    got = open_replayer(config).replay(1, 12, text=True, progress=False)
    want = open_replayer(load_config(local_config)).replay(1, 12, text=True, progress=False)
    assert got.equals(want)  # the file facet is the file name, the same in both
    ranks = [
        got.filter((got["iteration"] == it) & (got["position"] < size))["doc_id"].to_list()
        for it in range(1, 13)
    ]
    assert ranks == per_rank[0][:12]  # rank 0's batches, as the library streamed them
    # datasets downloads each remote file whole (a map-style shuffle needs every row): so does
    # the replay, once per object (keyed by ETag and size), counted
    files = sorted(tmp_path.glob("web-*.parquet"))
    assert fetched.total() == sum(f.stat().st_size for f in files)
    fetched.reset()
    open_replayer(load_config(remote_config)).replay(1, 2, progress=False)
    assert fetched.total() == 0  # the copies are reused while the objects are unchanged
