"""MosaicML streaming `remote` + `local`, as mosaicml-streaming 0.13.0's `Stream` uses them
(streaming/base/stream.py, cited by line):

- `index.json` is read from `local/split` when it is there, else downloaded from
  `remote/split/index.json` into it first (`get_shards`, :441-452);
- a shard is read from `local` when its raw file is there; else its compressed file (`zip_data`,
  when the index has one) or else its raw file is downloaded from `remote/split/<basename>` into
  `local` (`_prepare_shard_part`, :353-412; `_download_file`, :296-317), so only the shards a
  window reads are fetched, whole, as streaming fetches them;
- the S3 client is streaming's (`S3Downloader._create_s3_client`, storage/download.py:243-262):
  the default session, endpoint from S3_ENDPOINT_URL, unsigned requests when there are no
  credentials (:200-206) (dataloaders/storage/clients.py, rules "s3-endpoint-env").

Only `s3://` remotes are read; streaming's other backends (gs, oci, azure, hf, sftp, dbfs,
volumes) are refused in one line.
"""

from __future__ import annotations

from pathlib import Path

from dataloaders.storage import cached_copy
from dataloaders.storage.urls import join, scheme_of, shown

SCHEMES = ("s3",)


def is_object_storage(remote: str | None) -> bool:
    """A remote read through the storage layer (a plain folder is streaming's local copy)."""
    return remote is not None and scheme_of(remote) is not None


def check_remote(remote: str) -> str:
    """`remote` when its scheme is read here (or it is a folder), else a ValueError naming it."""
    if is_object_storage(remote) and scheme_of(remote) not in SCHEMES:
        raise ValueError(
            f"{shown(remote)}: a streaming remote is read from s3:// only here (streaming's "
            "other backends are not supported); download the shards into `local` and drop remote"
        )
    return remote


def fetch(remote: str, basename: str, dest: Path) -> Path:
    """`remote/basename` downloaded to `dest` (kept by its ETag and size: fetched once)."""
    path, _ = cached_copy(join(remote, basename), dest, "s3-endpoint-env")
    return path
