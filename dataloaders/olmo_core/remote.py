"""OLMo-core token files in object storage, read as ai2-olmo-core 3.0.0 `olmo_core/io.py` reads
them (cited by line):

- the schemes: `s3`, `r2`, `weka` through boto3 (:126-127, :156-159), `gs` through
  google-cloud-storage (:124-125), `http(s)` through requests (:128-129); a URL is
  `[a-z0-9]+://...` (:97-106 `is_url`);
- the clients: `_get_s3_client` (:867-884), profiles from S3_PROFILE / R2_PROFILE / WEKA_PROFILE
  (:887-908), endpoints from R2_ENDPOINT_URL / WEKA_ENDPOINT_URL (:911-931), OLMO_NO_SSL (:883),
  retries "standard" (:875): see dataloaders/storage/clients.py;
- a file's size by HEAD (`get_file_size`, :108-135) and its tokens by byte ranges
  (`get_bytes_range`, :138-169; `_s3_get_bytes_range` :978-1000 asks
  `Range=bytes=start-(start+n-1)`), so only the instances a window reads are fetched.

The Dolma metadata beside a token file (`x.npy` -> `x.csv.gz`) is small: it is copied once into
the cache (keyed by its ETag and size) and read from there.
"""

from __future__ import annotations

from pathlib import Path

from dataloaders.cache_dir import forensics_cache
from dataloaders.storage import cached_copy
from dataloaders.storage.faults import StorageError
from dataloaders.storage.urls import parse, scheme_of, shown

SCHEMES = ("s3", "r2", "weka", "gs", "http", "https")  # io.py:124-133


def check_scheme(url: str, where: str) -> str:
    """`url` when OLMo-core's io reads its scheme, else a ValueError naming it."""
    scheme = scheme_of(url)
    if scheme not in SCHEMES:
        raise ValueError(
            f"{shown(url)}: OLMo-core reads {', '.join(SCHEMES)} URLs only ({where}; "
            "olmo_core/io.py get_file_size)"
        )
    return url


def metadata_copy(url: str) -> Path | None:
    """A local copy of the Dolma metadata beside the token file `url`, or None without one."""
    meta = url.replace(".npy", ".csv.gz")  # OLMo-core's rule, as for local files
    if meta == url:
        return None
    obj = parse(meta)
    dest = forensics_cache("olmo-core", "remote", obj.scheme, obj.bucket, *obj.key.split("/"))
    try:
        path, _ = cached_copy(meta, dest, "scheme-profiles")
    except StorageError as err:
        if str(err).endswith("object not found"):
            return None
        raise
    return path
