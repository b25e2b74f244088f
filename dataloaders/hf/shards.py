"""The data files of a Hugging Face `datasets` run: which files, in which order, unchanged or not.

The order of the files is part of the data order: `load_dataset(fmt, data_files=[...])` reads them
in the order given and resolves a glob to its sorted matches, so we do the same. A shard that grew,
shrank or was rewritten moves every later document, so when the config records sizes and hashes
(`data.shards`, written by `record_shards`) we refuse to replay a file that differs.
"""

from __future__ import annotations

import glob
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dataloaders.errors import ForensicsError

# datasets' packaged builder for each file format, and the extensions that imply it.
BUILDERS = {"parquet": "parquet", "json": "json", "arrow": "arrow"}
_EXTENSIONS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
    ".arrow": "arrow",
}
_HASH_CHUNK = 1 << 22


@dataclass(frozen=True)
class Shard:
    """One data file: `index` is its position in the run's file list (the shard id datasets uses
    before any shuffle), `path` is absolute, `rows` is known once the file has been read."""

    index: int
    path: Path
    size: int
    url: str | None = None  # where the file lives when it is remote (`path`: its local copy)

    @property
    def name(self) -> str:
        return self.url.rstrip("/").rsplit("/", 1)[-1] if self.url else self.path.name


def resolve_files(patterns: list[Any], *, config: Path | None) -> list[Any]:
    """Expand globs (sorted, like datasets' pattern resolution) keeping the listed order, and
    refuse missing files: a missing shard would shift every document after it. A URL stays as
    it is (dataloaders/hf/remote.py reads it)."""
    where = f"{config}: " if config else ""
    out: list[Any] = []
    for pattern in patterns:
        text = str(pattern)
        if isinstance(pattern, str):
            if glob.has_magic(text):
                raise ForensicsError(f"{where}data.files: {text}: list remote files one by one")
            out.append(pattern)
        elif glob.has_magic(text):
            matches = sorted(Path(m) for m in glob.glob(text, recursive=True) if Path(m).is_file())
            if not matches:
                raise ForensicsError(f"{where}data.files: no file matches {text}")
            out.extend(matches)
        else:
            if not pattern.is_file():
                raise ForensicsError(f"{where}data.files: shard {pattern} not found")
            out.append(pattern)
    if len(set(out)) != len(out):
        raise ForensicsError(f"{where}data.files: a shard is listed twice")
    return out


def save_to_disk_files(path: Path, *, config: Path | None) -> list[Path]:
    """The arrow files of a `Dataset.save_to_disk` directory, in the order `load_from_disk`
    concatenates them (state.json's `_data_files`)."""
    where = f"{config}: " if config else ""
    state = path / "state.json"
    if not state.is_file():
        raise ForensicsError(f"{where}data.path: {path} is not a save_to_disk directory")
    try:
        names = [entry["filename"] for entry in json.loads(state.read_text())["_data_files"]]
    except (ValueError, KeyError, TypeError):
        raise ForensicsError(f"{where}data.path: {state} is not a datasets state.json") from None
    files = [path / name for name in names]
    for file in files:
        if not file.is_file():
            raise ForensicsError(f"{where}data.path: shard {file} not found")
    return files


def infer_format(files: list[Path], explicit: str | None, *, config: Path | None) -> str:
    """The datasets builder to read the files with: given, or implied by all extensions."""
    if explicit is not None:
        return BUILDERS[explicit]
    kinds = {_EXTENSIONS.get(f.suffix.lower()) for f in files}
    if len(kinds) != 1 or None in kinds:
        where = f"{config}: " if config else ""
        suffixes = sorted({f.suffix or "(none)" for f in files})
        raise ForensicsError(
            f"{where}data.file_format: cannot infer it from extensions {suffixes}; "
            "set parquet, json or arrow"
        )
    (kind,) = kinds
    assert kind is not None
    return kind


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file, read in 4 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def open_shards(files: list[Path], urls: dict[Path, str] | None = None) -> list[Shard]:
    """Shards in run order with their current sizes (`urls`: local copy -> the remote file)."""
    urls = urls or {}
    return [
        Shard(index=i, path=f.resolve(), size=f.stat().st_size, url=urls.get(f))
        for i, f in enumerate(files)
    ]


def verify_shards(shards: list[Shard], records: list, *, config: Path | None) -> None:
    """Refuse a shard whose size or hash differs from the recorded one, or a record that matches
    no shard (the run read a file this config no longer lists)."""
    where = f"{config}: " if config else ""
    base = config.parent if config else Path.cwd()
    by_path = {s.path: s for s in shards}
    names: dict[str, list[Shard]] = {}
    for shard in shards:
        names.setdefault(shard.name, []).append(shard)
    for record in records:
        shard = by_path.get((base / record.file).resolve())
        if shard is None:
            candidates = names.get(Path(record.file).name, [])
            if len(candidates) != 1:
                raise ForensicsError(f"{where}data.shards: {record.file} is not among data.files")
            shard = candidates[0]
        if shard.size != record.size:
            raise ForensicsError(
                f"{where}shard {shard.path} changed: {shard.size} bytes, "
                f"the run's was {record.size} bytes"
            )
        if record.sha256 is not None and sha256_file(shard.path) != record.sha256:
            raise ForensicsError(
                f"{where}shard {shard.path} changed: its sha256 differs from the recorded one"
            )


def record_shards(files: list[Path], *, base: Path | None = None) -> list[dict]:
    """The `data.shards` entries for files as they are now (size and sha256), to paste into the
    config when the run starts; `file` is relative to `base` (the config's directory) if given."""
    out = []
    for file in files:
        file = Path(file).resolve()
        name = str(file)
        if base is not None and file.is_relative_to(base.resolve()):
            name = str(file.relative_to(base.resolve()))
        out.append({"file": name, "size": file.stat().st_size, "sha256": sha256_file(file)})
    return out
