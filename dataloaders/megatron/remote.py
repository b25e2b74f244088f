"""Megatron datasets in object storage, read the way megatron-core reads them (Megatron-LM core
0.16.1, `megatron/core/datasets/`):

- the prefixes are `s3://bucket/key` or `msc://profile/key` (`object_storage_utils.py:16-17,158`);
- `--object-storage-cache-path` is required with them (`gpt_dataset.py:174-182` asserts it and
  builds `ObjectStorageConfig(path_to_idx_cache=...)` from it);
- the `.idx` is downloaded once into that cache, at the path joined with the URL without its
  scheme (`get_index_cache_path`, `object_storage_utils.py:170-192`; `cache_index_file` :243-281,
  called by `IndexedDataset.__init__`, `indexed_dataset.py:658-661`) and read from there;
- the `.bin` is read by byte ranges (`_S3BinReader.read`, `indexed_dataset.py:532-579`), never
  downloaded whole.

Here the `.idx` copy is checked against the object's ETag and size on every open and fetched
again when it changed; the `.bin` is a `RemoteArray` pinned to its ETag (dataloaders/storage/).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dataloaders.errors import ConfigError
from dataloaders.storage.faults import StorageError
from dataloaders.storage.objects import cached_copy, head
from dataloaders.storage.urls import scheme_of, shown

SCHEMES = ("s3", "msc")  # object_storage_utils.py:16-17
_SEEN: dict[str, Any] = {}  # object URL -> the ObjectInfo this process first read it as


def cache_prefix(url: str, cache: Path) -> Path:
    """Where megatron-core caches the `.idx` of the prefix `url`: `cache` joined with the URL
    without its scheme (object_storage_utils.py:181-188)."""
    rest = url.split("://", 1)[1].strip("/")
    if not rest or any(part in ("", ".", "..") for part in rest.split("/")):
        raise ConfigError(f"{shown(url)}: not a dataset prefix (scheme://bucket/key)")
    return cache.joinpath(*rest.split("/"))


def _place(entry: Any, cache: Any) -> Any:
    if not isinstance(entry, dict) or not isinstance(entry.get("prefix"), str):
        return entry
    url = entry["prefix"]
    scheme = scheme_of(url)
    if scheme is None:
        return entry
    if scheme not in SCHEMES:
        raise ConfigError(
            f"{shown(url)}: megatron-core reads s3:// and msc:// prefixes only "
            "(object_storage_utils.py is_object_storage_path)"
        )
    if cache is None:
        raise ConfigError(
            f"{shown(url)}: a prefix in object storage needs data.object_storage_cache_path "
            "(Megatron's --object-storage-cache-path, required by megatron-core's GPTDataset)"
        )
    return {**entry, "prefix": str(cache_prefix(url, Path(cache))), "remote": url}


def place_remote_prefixes(raw: Any) -> Any:
    """The `data:` mapping with each remote prefix moved to `remote` and its cache place in
    `prefix`; an entry already placed (a dumped config read again) is left as it is."""
    if not isinstance(raw, dict):
        return raw
    cache = raw.get("object_storage_cache_path")
    out = dict(raw)
    if isinstance(raw.get("blend"), list):
        out["blend"] = [_place(e, cache) for e in raw["blend"]]
    if isinstance(raw.get("stages"), list):
        out["stages"] = [
            {**st, "blend": [_place(e, cache) for e in st["blend"]]}
            if isinstance(st, dict) and isinstance(st.get("blend"), list)
            else st
            for st in raw["stages"]
        ]
    return out


def open_remote(url: str, prefix: Path) -> tuple[Any, Path]:
    """The `.idx` of the remote prefix `url` cached at `prefix.idx` (fetched when absent or
    when the object's ETag or size changed), and the `.bin`'s identity: its ObjectInfo and a
    stamp file `prefix.bin.object.json` whose contents change when the `.bin` object does (so
    the checks cached per file version are made again for a new object)."""
    import json

    _, idx = cached_copy(f"{url}.idx", Path(f"{prefix}.idx"), "default-session")
    info = head(f"{url}.bin", "default-session")
    for seen in (idx, info):  # one version of each object per process: never two mixed
        first = _SEEN.setdefault(seen.url, seen)
        if (first.etag, first.size) != (seen.etag, seen.size):
            raise StorageError(
                seen.url,
                f"the object changed while this command ran (ETag {first.etag} -> {seen.etag}); "
                "refused, since its result would mix two versions of the data: run again",
            )
    stamp = Path(f"{prefix}.bin.object.json")
    identity = json.dumps({"url": shown(f"{url}.bin"), "size": info.size, "etag": info.etag})
    if not stamp.is_file() or stamp.read_text(encoding="utf-8") != identity:
        stamp.parent.mkdir(parents=True, exist_ok=True)
        tmp = stamp.with_name(stamp.name + ".tmp")
        tmp.write_text(identity, encoding="utf-8")
        tmp.replace(stamp)
    return info, stamp
