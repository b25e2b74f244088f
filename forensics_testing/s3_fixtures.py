"""The remote-data tests' fixtures, a pytest plugin tests/conftest.py loads (a second
conftest.py would shadow the suite's own under the name `conftest`): one moto S3 server on
127.0.0.1 for the whole session (moto[server]'s `ThreadedMotoServer` speaks the S3 API over HTTP,
which boto3 and s3fs talk to as they would to AWS), and per test a fresh bucket with the
environment pointed at it."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from dataloaders.storage import fetched

_buckets = itertools.count()


@pytest.fixture(autouse=True)
def _fresh_fetch_count() -> Iterator[None]:
    """The process-wide count of bytes fetched starts at zero in every test and is left at zero
    (a later in-process command on a local run reports none)."""
    fetched.reset()
    yield
    fetched.reset()


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """http://127.0.0.1:PORT of a moto S3 server started by this session (ended at its end)."""
    moto_server = pytest.importorskip("moto.server")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """A new bucket on the moto server, the AWS_* variables aimed at it (fake credentials), and
    `put(local_path, key)` / `url(key)` helpers."""
    import boto3

    for name in ("AWS_PROFILE", "S3_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing-secret-key")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("FORENSICS_STORAGE_ATTEMPTS", "2")
    monkeypatch.setenv("FORENSICS_STORAGE_CONNECT_TIMEOUT", "2")
    monkeypatch.setenv("FORENSICS_STORAGE_READ_TIMEOUT", "10")
    bucket = f"bucket-{next(_buckets)}"
    client = boto3.client("s3", endpoint_url=moto_endpoint)
    client.create_bucket(Bucket=bucket)

    def put(path: Path, key: str) -> str:
        client.upload_file(str(path), bucket, key)
        return f"s3://{bucket}/{key}"

    def put_tree(folder: Path, prefix: str) -> str:
        for file in sorted(p for p in folder.rglob("*") if p.is_file()):
            put(file, f"{prefix}/{file.relative_to(folder).as_posix()}")
        return f"s3://{bucket}/{prefix}"

    return SimpleNamespace(
        endpoint=moto_endpoint,
        bucket=bucket,
        client=client,
        put=put,
        put_tree=put_tree,
        url=lambda key: f"s3://{bucket}/{key}",
    )
