"""Remote copies of the test runs for the object-storage tests (tests/dataloaders/storage/): the
small Megatron run (tests/conftest.py `small_run`) with its `.bin/.idx` on an S3 endpoint, a config
naming them by `s3://` URL, everything else local."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import yaml


def remote_config(run: Path, s3: SimpleNamespace, folder: Path) -> Path:
    """Upload the run's datasets under `s3://<bucket>/run/data/` and write `folder/remote.yaml`:
    the run's own config with each prefix an s3:// URL, the other paths absolute."""
    for path in sorted((run / "data").iterdir()):
        if path.suffix in (".bin", ".idx"):
            s3.put(path, f"run/data/{path.name}")
    raw = yaml.safe_load((run / "forensics.yaml").read_text(encoding="utf-8"))
    for stage in raw["data"]["stages"]:
        for spec in stage["blend"]:
            spec["prefix"] = s3.url(f"run/{spec['prefix']}")
            spec["manifest"] = str(run / spec["manifest"])
    raw["data"]["object_storage_cache_path"] = str(folder / "object-cache")
    for key in ("tokenizer", "checkpoint_dir", "log"):
        raw[key] = str(run / raw[key])
    out = folder / "remote.yaml"
    out.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return out
