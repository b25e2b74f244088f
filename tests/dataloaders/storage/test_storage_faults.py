"""Every storage fault ends in one line naming the object's URL, never a hang, a traceback or a
silently wrong read, and no credential appears in it: a missing object, an object rewritten
between the index and the read, no credentials, an unreachable endpoint, a throttling storm."""

from __future__ import annotations

import http.server
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml

from dataloaders.errors import ConfigError
from dataloaders.megatron.indexed import IndexedDataset, write_indexed_dataset
from dataloaders.storage import StorageError, head
from forensics_testing.small_run import cli

SECRET = "testing-secret-key"


@pytest.fixture
def dataset(s3, tmp_path) -> str:
    """A 40-document Megatron dataset on the S3 endpoint; its prefix's URL."""
    rng = np.random.default_rng(3)
    docs = [rng.integers(0, 500, int(n)) for n in rng.integers(5, 60, 40)]
    prefix = write_indexed_dataset(tmp_path / "src" / "web", docs, np.uint16)
    for suffix in (".bin", ".idx"):
        s3.put(Path(f"{prefix}{suffix}"), f"data/web{suffix}")
    return s3.url("data/web")


def test_missing_object_names_its_url(s3, tmp_path):
    with pytest.raises(StorageError, match=r"^s3://bucket-\d+/data/gone\.idx: object not found$"):
        IndexedDataset(tmp_path / "c" / "gone", remote=s3.url("data/gone"))


def test_object_rewritten_after_the_index_is_refused(s3, dataset, tmp_path):
    ds = IndexedDataset(tmp_path / "c" / "web", remote=dataset)
    first = ds.get(0).copy()
    data = bytearray(s3.client.get_object(Bucket=s3.bucket, Key="data/web.bin")["Body"].read())
    data[-2:] = b"\x01\x00"  # same size, new content: only the ETag tells
    s3.client.put_object(Bucket=s3.bucket, Key="data/web.bin", Body=bytes(data))
    # a fresh reader, no cache
    ds.tokens.__init__(ds.tokens.info, ds.dtype, len(ds.tokens), rules="default-session")
    with pytest.raises(StorageError, match="changed after it was indexed"):
        ds.get(len(ds) - 1)
    with pytest.raises(StorageError, match="changed while this command ran"):
        IndexedDataset(tmp_path / "c" / "web", remote=dataset)  # a second open, same process
    assert first.size


def test_no_credentials(s3, dataset, tmp_path, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(ConfigError, match=r"^s3://bucket-\d+/data/web\.idx: no credentials"):
        IndexedDataset(tmp_path / "c" / "web", remote=dataset)


def test_unreachable_endpoint(s3, dataset, tmp_path, monkeypatch):
    with socket.socket() as sock:  # a port on 127.0.0.1 nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://user:hunter2@127.0.0.1:{port}")
    with pytest.raises(StorageError) as err:
        IndexedDataset(tmp_path / "c" / "web", remote=dataset)
    message = str(err.value)
    assert "unreachable (2 attempts)" in message and message.startswith("s3://")
    assert "hunter2" not in message and SECRET not in message


@pytest.fixture
def throttling_endpoint() -> Iterator[str]:
    """An endpoint on 127.0.0.1 that answers every request as S3 does under a throttling storm
    (503 SlowDown), counting the requests."""

    class SlowDown(http.server.BaseHTTPRequestHandler):
        count = 0

        def _answer(self) -> None:
            SlowDown.count += 1
            body = b"<Error><Code>SlowDown</Code><Message>Please reduce</Message></Error>"
            self.send_response(503)
            self.send_header("Content-Length", str(len(body) if self.command != "HEAD" else 0))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_HEAD = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SlowDown)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", SlowDown
    finally:
        server.shutdown()
        server.server_close()


def test_throttling_storm_stops_after_bounded_retries(s3, throttling_endpoint, monkeypatch):
    endpoint, handler = throttling_endpoint
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("FORENSICS_STORAGE_ATTEMPTS", "3")
    with pytest.raises(StorageError, match=r"throttled by the storage endpoint \(503\)|SlowDown"):
        head("s3://b/data/web.bin", "default-session")
    # bounded: the tries FORENSICS_STORAGE_ATTEMPTS allows (botocore may add one redirect probe)
    assert 3 <= handler.count <= 4


def test_prefix_schemes_and_cache_path_refused_in_one_line(tmp_path):
    from dataloaders.run_config import config_from_dict

    def config(prefix: str, cache: bool = True) -> dict:
        data = {"format": "megatron", "seq_length": 8, "blend": [{"prefix": prefix}]}
        if cache:
            data["object_storage_cache_path"] = "osc"
        return {"data": data, "training": {"global_batch_size": 2, "train_iters": 2}}

    with pytest.raises(ConfigError, match="needs data.object_storage_cache_path"):
        config_from_dict(config("s3://b/web", cache=False), base_dir=tmp_path, source=None)
    with pytest.raises(ConfigError, match="megatron-core reads s3:// and msc:// prefixes only"):
        config_from_dict(config("gs://b/web"), base_dir=tmp_path, source=None)
    msc = config_from_dict(config("msc://profile/web"), base_dir=tmp_path, source=None)
    spec = msc.data.data_stages[0].blend[0]
    with pytest.raises(StorageError, match=r"^msc://profile/web\.idx: msc:// needs the multi"):
        IndexedDataset(spec.prefix, remote=spec.remote)


def test_cli_fault_is_one_line_without_secrets(s3, dataset, tmp_path):
    """The command a user runs: exit 2, one line naming the URL, no credential anywhere."""
    s3.client.delete_object(Bucket=s3.bucket, Key="data/web.bin")
    config = tmp_path / "run.yaml"
    data = {"format": "megatron", "seq_length": 16, "blend": [{"prefix": dataset}]}
    data["object_storage_cache_path"] = str(tmp_path / "osc")
    raw = {"data": data, "training": {"global_batch_size": 2, "train_iters": 5}}
    config.write_text(yaml.safe_dump(raw), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k.startswith(("AWS_", "FORENSICS_"))}
    out = tmp_path / "r.parquet"
    done = cli("replay", "--config", str(config), "--step", "3", "--out", str(out), "--no-progress",
               env=env)  # fmt: skip
    assert done.returncode == 2
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and f"{dataset}.bin: object not found" in lines[0], lines
    assert SECRET not in done.stdout + done.stderr
    assert not out.exists()
