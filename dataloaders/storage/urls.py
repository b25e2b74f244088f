"""Object-storage URLs: which strings are remote, how they split, and how they are shown.

The schemes are the ones the training libraries themselves read:

- megatron-core reads `s3://` and `msc://` (Megatron-LM core 0.16.1
  `megatron/core/datasets/object_storage_utils.py:16-17`, `is_object_storage_path` at :158);
- OLMo-core reads `s3://`, `r2://`, `weka://`, `gs://` and `http(s)://` (ai2-olmo-core 3.0.0
  `olmo_core/io.py:97-106` `is_url`, :124-133 the schemes `get_file_size` dispatches on);
- MosaicML streaming and HF `datasets` read the same through boto3 / fsspec.

A URL is shown without its query string and without any user:password in an endpoint, so a
signed URL or a credential never reaches a message, a log line or a report.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

S3_LIKE = ("s3", "r2", "weka")  # boto3, with OLMo-core's per-scheme profiles and endpoints
SCHEMES = (*S3_LIKE, "gs", "http", "https", "msc")
_URL = re.compile(r"^([a-z][a-z0-9+.-]*)://", re.IGNORECASE)


def scheme_of(path: str | os.PathLike[str]) -> str | None:
    """The URL scheme of `path` in lower case, or None for a local path (OLMo-core's `is_url`
    test: `[a-z0-9]+://`)."""
    if not isinstance(path, str):
        return None
    match = _URL.match(path)
    return match.group(1).lower() if match else None


def is_remote(path: str | os.PathLike[str]) -> bool:
    """True for a URL of object storage or the web (`s3://`, `gs://`, `https://`, ...)."""
    return scheme_of(path) is not None and scheme_of(path) != "file"


@dataclass(frozen=True)
class ObjectURL:
    """One object: `scheme://bucket/key` (http(s): the whole URL, bucket = host)."""

    url: str
    scheme: str
    bucket: str
    key: str

    def __str__(self) -> str:
        return shown(self.url)


def parse(url: str) -> ObjectURL:
    """Split a URL into scheme, bucket and key; a ValueError for a scheme no library reads."""
    scheme = scheme_of(url)
    if scheme not in SCHEMES:
        raise ValueError(
            f"{shown(url)}: unsupported scheme {scheme!r} (read: {', '.join(SCHEMES)})"
        )
    parts = urlsplit(url)
    key = parts.path.lstrip("/")
    return ObjectURL(url=url, scheme=scheme, bucket=parts.netloc, key=key)


def join(prefix: str, name: str) -> str:
    """`prefix/name` for a URL prefix (one slash between)."""
    return f"{prefix.rstrip('/')}/{name.lstrip('/')}"


def shown(url: str | None) -> str:
    """`url` fit to print: no query (a signed URL's signature lives there), no fragment, and no
    user:password before the host."""
    if not url:
        return ""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unprintable URL>"
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    if not parts.scheme:
        return url
    return urlunsplit(
        (parts.scheme, host if "@" in parts.netloc else parts.netloc, parts.path, "", "")
    )
