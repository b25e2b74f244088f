"""Reading objects: size and identity (HEAD), byte ranges, whole small objects, a local copy
fetched once, uploads and listings. S3-like schemes go through boto3 (as megatron-core and
OLMo-core do), http(s) through fsspec; `gs://` and `msc://` need their own clients (gcsfs, the
multi-storage client) and are refused in one line when those are not installed.

Every read of a ranged or whole object is pinned to the ETag seen first (`If-Match`), so an
object rewritten between the index and the read is refused, never mixed. Bytes fetched are
counted per object (`fetched`), for the report and the replay's summary line.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dataloaders.storage import clients
from dataloaders.storage.clients import Rules
from dataloaders.storage.faults import StorageError, s3_fault
from dataloaders.storage.urls import S3_LIKE, ObjectURL, parse, shown


@dataclass(frozen=True)
class ObjectInfo:
    """One object's identity: its size in bytes and its ETag (quotes kept off)."""

    url: str
    size: int
    etag: str


class FetchCounter:
    """Bytes and requests fetched from object storage in this process, per object URL."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.bytes: dict[str, int] = {}
        self.requests: dict[str, int] = {}

    def add(self, url: str, n: int) -> None:
        with self._lock:
            key = shown(url)
            self.bytes[key] = self.bytes.get(key, 0) + n
            self.requests[key] = self.requests.get(key, 0) + 1

    def total(self) -> int:
        with self._lock:
            return sum(self.bytes.values())

    def summary(self) -> dict[str, Any]:
        """{"bytes": total, "requests": total, "objects": {url: bytes}} for report.json."""
        with self._lock:
            return {
                "bytes": sum(self.bytes.values()),
                "requests": sum(self.requests.values()),
                "objects": dict(sorted(self.bytes.items())),
            }

    def line(self) -> str | None:
        """The one-line summary the commands print, or None when nothing was fetched."""
        got = self.summary()
        if not got["requests"]:
            return None
        return (
            f"object storage: {got['bytes']:,} bytes fetched in {got['requests']:,} requests "
            f"from {len(got['objects'])} objects"
        )

    def reset(self) -> None:
        with self._lock:
            self.bytes.clear()
            self.requests.clear()


fetched = FetchCounter()


def _refuse_other(obj: ObjectURL) -> None:
    if obj.scheme == "gs":
        try:
            import gcsfs  # noqa: F401
        except ModuleNotFoundError:
            raise StorageError(
                obj.url, "gs:// needs gcsfs (pip install gcsfs), which is not installed"
            ) from None
    if obj.scheme == "msc":
        try:
            import multistorageclient  # noqa: F401
        except ModuleNotFoundError:
            raise StorageError(
                obj.url,
                "msc:// needs the multi-storage client (pip install multi-storage-client), "
                "which is not installed",
            ) from None


def _fsspec(obj: ObjectURL) -> Any:
    import fsspec

    _refuse_other(obj)
    return fsspec.filesystem(obj.scheme)


def _s3_call(obj: ObjectURL, rules: Rules, etag: str, method: str, **kwargs: Any) -> Any:
    import botocore.exceptions as boto

    client = clients.s3_client(obj.url, obj.scheme, rules)
    try:
        return getattr(client, method)(Bucket=obj.bucket, Key=obj.key, **kwargs)
    except (boto.BotoCoreError, boto.ClientError) as err:
        raise s3_fault(
            obj.url, err, endpoint=clients.endpoint_of(client), tries=clients.attempts(), etag=etag
        ) from None


def head(url: str, rules: Rules = "scheme-profiles") -> ObjectInfo:
    """Size and ETag of the object at `url` (one HEAD request)."""
    obj = parse(url)
    if obj.scheme in S3_LIKE:
        got = _s3_call(obj, rules, "", "head_object")
        return ObjectInfo(url, int(got["ContentLength"]), str(got.get("ETag", "")).strip('"'))
    fs = _fsspec(obj)
    try:
        info = fs.info(url)
    except FileNotFoundError:
        raise StorageError(url, "object not found") from None
    except OSError as err:
        raise StorageError(url, f"storage request failed ({type(err).__name__})") from None
    etag = str(info.get("ETag") or info.get("etag") or info.get("md5Hash") or "").strip('"')
    return ObjectInfo(url, int(info.get("size") or 0), etag)


def read_range(info: ObjectInfo, start: int, stop: int, rules: Rules = "scheme-profiles") -> bytes:
    """Bytes [start, stop) of the object `info` describes, refused if it changed since."""
    if stop <= start:
        return b""
    if stop > info.size:
        raise StorageError(info.url, f"byte range [{start}, {stop}) beyond its {info.size} bytes")
    obj = parse(info.url)
    if obj.scheme in S3_LIKE:
        extra = {"IfMatch": info.etag} if info.etag else {}
        got = _s3_call(
            obj, rules, info.etag, "get_object", Range=f"bytes={start}-{stop - 1}", **extra
        )
        data = _read_body(obj, got, rules, info.etag)
    else:
        data = _fsspec(obj).cat_file(info.url, start=start, end=stop)
    fetched.add(info.url, len(data))
    if len(data) != stop - start:
        raise StorageError(info.url, f"asked for {stop - start} bytes at {start}, got {len(data)}")
    return data


def _read_body(obj: ObjectURL, got: dict[str, Any], rules: Rules, etag: str) -> bytes:
    import botocore.exceptions as boto

    try:
        return got["Body"].read()
    except (boto.BotoCoreError, OSError) as err:
        client = clients.s3_client(obj.url, obj.scheme, rules)
        raise s3_fault(
            obj.url, err, endpoint=clients.endpoint_of(client), tries=1, etag=etag
        ) from None


def read_all(url: str, rules: Rules = "scheme-profiles") -> tuple[ObjectInfo, bytes]:
    """A whole (small) object: index.json, a config, a metadata file."""
    info = head(url, rules)
    return info, read_range(info, 0, info.size, rules) if info.size else b""


def cached_copy(url: str, dest: Path, rules: Rules = "scheme-profiles") -> tuple[Path, ObjectInfo]:
    """`dest` holding the object at `url`, fetched only when the copy there is not this object
    (the cache is keyed by ETag and size, recorded beside it in `dest.object.json`)."""
    info = head(url, rules)
    stamp = dest.with_name(dest.name + ".object.json")
    identity = {"url": shown(url), "size": info.size, "etag": info.etag}
    if dest.is_file() and stamp.is_file() and dest.stat().st_size == info.size:
        try:
            if json.loads(stamp.read_text(encoding="utf-8")) == identity:
                return dest, info
        except (OSError, ValueError):
            pass
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    step = 64 << 20
    try:
        with open(tmp, "wb") as out:
            for start in range(0, info.size, step):
                out.write(read_range(info, start, min(info.size, start + step), rules))
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    stamp.write_text(json.dumps(identity), encoding="utf-8")
    return dest, info


def upload(
    source: Path, url: str, rules: Rules = "scheme-profiles", *, overwrite: bool = False
) -> None:
    """Put the local file `source` at `url`; an existing object is kept unless `overwrite`."""
    obj = parse(url)
    if obj.scheme not in S3_LIKE:
        raise StorageError(url, f"writing to {obj.scheme}:// is not supported (s3, r2, weka are)")
    if not overwrite:
        try:
            head(url, rules)
        except StorageError as err:
            if not str(err).endswith("object not found"):
                raise
        else:
            raise StorageError(url, "already exists; pass --force to overwrite it")
    with open(source, "rb") as body:
        _s3_call(obj, rules, "", "put_object", Body=body)


def list_objects(prefix: str, rules: Rules = "scheme-profiles") -> list[str]:
    """URLs of the objects under `prefix` (a folder-like URL), sorted."""
    obj = parse(prefix)
    if obj.scheme not in S3_LIKE:
        fs = _fsspec(obj)
        return sorted(f"{obj.scheme}://{p}" for p in fs.find(prefix))
    import botocore.exceptions as boto

    client = clients.s3_client(prefix, obj.scheme, rules)
    found: list[str] = []
    try:
        for page in client.get_paginator("list_objects_v2").paginate(
            Bucket=obj.bucket, Prefix=obj.key
        ):
            found.extend(
                f"{obj.scheme}://{obj.bucket}/{o['Key']}" for o in page.get("Contents", [])
            )
    except (boto.BotoCoreError, boto.ClientError) as err:
        raise s3_fault(
            prefix, err, endpoint=clients.endpoint_of(client), tries=clients.attempts()
        ) from None
    return sorted(found)
