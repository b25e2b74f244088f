"""Remote copies of the test runs for the object-storage tests (tests/dataloaders/storage/): the
small Megatron run (tests/conftest.py `small_run`) with its `.bin/.idx` on an S3 endpoint, a config
naming them by `s3://` URL, everything else local."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import yaml

from forensics_testing.file_runs import olmo_pages
from forensics_testing.olmo_core_run import config_dict, write_config


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


def olmo_spike_run(folder: Path, s3: SimpleNamespace) -> tuple[Path, Path]:
    """A small OLMo-core run of three sources (forensics_testing/file_runs.py pages), on disk
    and on the S3 endpoint: (local config, remote config naming the token files by URL)."""
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    texts, tok = olmo_pages(folder, 100)
    for name, docs in texts.items():
        ids = [np.asarray(tok.encode(t).ids + [0], dtype=np.uint16) for t in docs]
        np.concatenate(ids).tofile(folder / f"{name}.npy")
        s3.put(folder / f"{name}.npy", f"olmo/{name}.npy")
    sources = {name: [f"{name}.npy"] for name in ("web", "books", "forum")}
    config = config_dict(sources, seq=64, ipb=12, seed=17, world=2, train_iters=90)
    config["data"]["vocab_size"] = 3000
    config["tokenizer"] = "tokenizer.json"
    config["checkpoints"] = list(range(10, 91, 10))
    local = write_config(folder, config)
    for source in config["data"]["sources"]:
        source["paths"] = [s3.url(f"olmo/{p}") for p in source["paths"]]
    config["tokenizer"] = str(folder / "tokenizer.json")
    return local, write_config(folder.parent, config, "remote-olmo.yaml")
