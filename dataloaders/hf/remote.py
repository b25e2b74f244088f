"""Remote `data_files` of a Hugging Face `datasets` run, read as `datasets` reads them: through
fsspec (s3fs for `s3://`, fsspec's HTTP filesystem for `http(s)://`, gcsfs for `gs://`), with the
run's `storage_options` handed to the filesystem (`load_dataset(..., storage_options=...)`,
datasets 5.2.0 `load.py`, passed on to `DownloadConfig.storage_options` and fsspec's
`url_to_fs(url, **storage_options)` in `utils/file_utils.py`).

`datasets` downloads each remote data file whole into its cache before it builds a map-style
dataset (`DownloadManager.download` -> `cached_path`), and a map-style shuffle draws from every
row, so the replay does the same: each file is copied once into the forensics cache, kept by its
ETag and size (fetched again only when the object changed), and read from there; the bytes are
counted. The replay's `file` facet and the rebuilt `data_files.json` still name the URLs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dataloaders.cache_dir import forensics_cache
from dataloaders.storage.clients import attempts
from dataloaders.storage.faults import StorageError
from dataloaders.storage.objects import fetched
from dataloaders.storage.urls import parse, shown

CHUNK = 8 << 20


def _filesystem(scheme: str, storage_options: dict[str, Any] | None) -> Any:
    import fsspec

    options = dict(storage_options or {})
    if scheme in ("s3", "s3a"):  # bounded retries and timeouts unless the run set its own
        options.setdefault(
            "config_kwargs",
            {"connect_timeout": 10, "read_timeout": 60, "retries": {"max_attempts": attempts()}},
        )
    try:
        return fsspec.filesystem(scheme, **options)
    except ImportError as err:
        raise StorageError(
            f"{scheme}://", f"needs an fsspec backend that is missing ({err.name})"
        ) from None


def _fault(url: str, err: BaseException) -> StorageError:
    if isinstance(err, FileNotFoundError):
        return StorageError(url, "object not found")
    if isinstance(err, PermissionError):
        return StorageError(url, "access denied: check the credentials or storage_options")
    return StorageError(url, f"storage request failed ({type(err).__name__})")


def local_copy(url: str, storage_options: dict[str, Any] | None) -> Path:
    """The data file at `url` in the forensics cache (downloaded when absent or changed)."""
    obj = parse(url)
    fs = _filesystem(obj.scheme, storage_options)
    try:
        info = fs.info(url)
    except Exception as err:  # fsspec backends raise their own types (OSError, ClientError)
        raise _fault(url, err) from None
    size = int(info.get("size") or 0)
    etag = str(info.get("ETag") or info.get("etag") or info.get("md5Hash") or "").strip('"')
    dest = forensics_cache("hf", "remote", obj.scheme, obj.bucket, *obj.key.split("/"))
    stamp = dest.with_name(dest.name + ".object.json")
    identity = {"url": shown(url), "size": size, "etag": etag}
    if dest.is_file() and stamp.is_file() and dest.stat().st_size == size:
        try:
            if json.loads(stamp.read_text(encoding="utf-8")) == identity:
                return dest
        except (OSError, ValueError):
            pass
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    try:
        with fs.open(url, "rb") as source, open(tmp, "wb") as out:
            while block := source.read(CHUNK):
                out.write(block)
                fetched.add(url, len(block))
        if tmp.stat().st_size != size:
            raise StorageError(url, f"read {tmp.stat().st_size} bytes, the object has {size}")
        os.replace(tmp, dest)
    except StorageError:
        raise
    except Exception as err:
        raise _fault(url, err) from None
    finally:
        tmp.unlink(missing_ok=True)
    stamp.write_text(json.dumps(identity), encoding="utf-8")
    return dest
