"""Megatron runs whose `.bin/.idx` live in S3 (moto's server on 127.0.0.1), read as
megatron-core reads them (dataloaders/megatron/remote.py): the same documents as megatron-core's
own object-storage reader, the same replay, spike, rebuild and scan as the local copy, and bytes
fetched that follow the window."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from dataloaders.megatron.indexed import IndexedDataset
from dataloaders.run_config import load_config
from dataloaders.storage import fetched
from forensics_testing.remote_runs import remote_config
from forensics_testing.small_run import SPIKE_ARGS, cli

NAMES = ("prose", "code", "web", "web_v2")


def test_megatron_core_reads_the_same_documents_from_s3(megatron, small_run, s3, tmp_path):
    """Oracle: megatron-core 0.16.1's own S3 path (`IndexedDataset(..., mmap=False,
    object_storage_config=ObjectStorageConfig(path_to_idx_cache=...))`, indexed_dataset.py:658-
    731: `.idx` downloaded by `cache_index_file`, `.bin` read by `_S3BinReader`) against ours."""
    from megatron.core.datasets.object_storage_utils import ObjectStorageConfig

    prefix = "run/data/web_text_document"
    for suffix in (".bin", ".idx"):
        s3.put(small_run / "data" / f"web_text_document{suffix}", prefix + suffix)
    url = s3.url(prefix)
    theirs_cache = tmp_path / "megatron-cache"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = megatron.indexed.IndexedDataset(
            url, mmap=False, object_storage_config=ObjectStorageConfig(str(theirs_cache))
        )
    ours_cache = tmp_path / "ours" / s3.bucket / prefix
    ours = IndexedDataset(ours_cache, remote=url)
    # the .idx cached at megatron-core's place (cache joined with the URL sans scheme)
    assert (theirs_cache / s3.bucket / f"{prefix}.idx").read_bytes() == Path(
        f"{ours_cache}.idx"
    ).read_bytes()
    assert len(theirs) == len(ours) and ours.num_documents > 50
    for i in range(len(ours)):
        np.testing.assert_array_equal(ours.get(i), theirs.get(i))


def test_remote_replay_equals_local_and_fetches_the_window(small_run, s3, tmp_path, monkeypatch):
    from forensics.replay import open_replayer

    monkeypatch.setenv("FORENSICS_STORAGE_BLOCK_BYTES", "512")
    remote = load_config(remote_config(small_run, s3, tmp_path))
    local = load_config(small_run / "forensics.yaml")
    assert remote.order_hash() == local.order_hash()
    fetched.reset()
    got = open_replayer(remote).replay(165, 170, text=True, progress=False)
    small = fetched.total()
    want = open_replayer(local).replay(165, 170, text=True, progress=False)
    assert got.equals(want)
    # 6 iterations x 8 samples x 65 tokens x 2 bytes, and the 512-byte blocks around them
    sizes = sum((small_run / "data" / f"{n}_text_document.bin").stat().st_size for n in NAMES)
    assert 0 < small < sizes / 4
    fetched.reset()
    wide = open_replayer(remote).replay(131, 170, text=True, progress=False)
    assert wide.equals(open_replayer(local).replay(131, 170, text=True, progress=False))
    assert small < fetched.total() <= sizes  # a longer window reads more, never more than all


def test_remote_spike_rebuild_scan_equal_local(small_run, s3, tmp_path):
    """The whole runbook on the remote copy: the restart flags, the block list and the rebuilt
    .bin/.idx byte-equal the local run's; the bytes fetched are reported."""
    config = remote_config(small_run, s3, tmp_path)
    spike = tmp_path / "spike"
    done = cli("spike", "--config", str(config), *SPIKE_ARGS, "--out", str(spike), "--quiet")
    assert done.returncode == 0, done.stderr
    assert "object storage:" in done.stdout and "bytes fetched" in done.stdout
    local = small_run / "spike"
    for name in ("restart-megatron-lm.flags", "documents.parquet"):
        assert (spike / name).read_bytes() == (local / name).read_bytes(), name
    report = (spike / "report.json").read_text(encoding="utf-8")
    assert '"object_storage"' in report and "testing-secret-key" not in report
    rebuilt = tmp_path / "rebuilt"
    done = cli("rebuild", str(spike), "--config", str(config), "--out", str(rebuilt))
    assert done.returncode == 0, done.stderr
    reference = tmp_path / "rebuilt-local"
    done = cli("rebuild", str(local), "--config", str(small_run / "forensics.yaml"), "--out",
               str(reference))  # fmt: skip
    assert done.returncode == 0, done.stderr
    copies = sorted(p.name for p in reference.iterdir() if p.suffix in (".bin", ".idx"))
    assert copies
    for name in copies:
        assert (rebuilt / name).read_bytes() == (reference / name).read_bytes(), name
    data_path = (rebuilt / "data_path.txt").read_text(encoding="utf-8")
    assert s3.url("run/data/prose_text_document") in data_path  # untouched: still its URL
    assert str(rebuilt / copies[0].rsplit(".", 1)[0]) in data_path  # the copy: local
    uploaded = tmp_path / "rebuilt-uploaded"
    done = cli("rebuild", str(spike), "--config", str(config), "--out", str(uploaded),
               "--upload-to", s3.url("rebuilt"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    for name in copies:  # the filtered copies in the bucket, named by the restart's line
        body = s3.client.get_object(Bucket=s3.bucket, Key=f"rebuilt/{name}")["Body"].read()
        assert body == (reference / name).read_bytes(), name
    line = (uploaded / "data_path.txt").read_text(encoding="utf-8")
    assert s3.url(f"rebuilt/{copies[0].rsplit('.', 1)[0]}") in line and str(uploaded) not in line
    scans, said = {}, {}
    for label, cfg in (("remote", config), ("local", small_run / "forensics.yaml")):
        scans[label] = tmp_path / f"scan-{label}"
        done = cli("scan", "--config", str(cfg), "--from", "141", "--to", "170", "--out",
                   str(scans[label]), "--quiet")  # fmt: skip
        assert done.returncode == 0, done.stderr
        said[label] = done.stdout
    assert "bytes fetched" in said["remote"] and "bytes fetched" not in said["local"]
    for name in ("scan.parquet", "blocklist.parquet"):
        assert pl.read_parquet(scans["remote"] / name).equals(
            pl.read_parquet(scans["local"] / name)
        ), name


@pytest.mark.parametrize("flag", ["--object-storage-cache-path"])
def test_launch_line_names_s3_prefixes(tmp_path, flag):
    """`--data-path 0.7 s3://b/web 0.3 s3://b/code --object-storage-cache-path C`: the prefixes
    stay URLs and are placed in the cache as megatron-core places their .idx."""
    from dataloaders.megatron.launch_args import config_from_megatron_args
    from dataloaders.run_config import config_from_dict

    argv = ["--data-path", "0.7", "s3://b/x/web", "0.3", "s3://b/y/code", "--seq-length", "64",
            "--global-batch-size", "8", "--train-iters", "10", flag, "osc"]  # fmt: skip
    config = config_from_megatron_args(argv, config_from_dict=config_from_dict, cwd=tmp_path)
    specs = config.data.data_stages[0].blend
    assert [s.remote for s in specs] == ["s3://b/x/web", "s3://b/y/code"]
    assert [s.prefix for s in specs] == [tmp_path / "osc/b/x/web", tmp_path / "osc/b/y/code"]
    assert [s.display_name for s in specs] == ["web", "code"]
