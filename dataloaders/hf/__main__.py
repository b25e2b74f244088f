"""`python -m dataloaders.hf record CONFIG`: print the `data.shards` block (size, sha256) for the
files a `format: hf` config names, to paste into the config when the run starts. A later replay
then refuses any shard that changed."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from dataloaders.errors import ForensicsError
from dataloaders.hf.shards import record_shards, resolve_files, save_to_disk_files
from dataloaders.run_config import load_config


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "record":
        print("usage: python -m dataloaders.hf record CONFIG", file=sys.stderr)
        return 2
    try:
        config = load_config(argv[1])
        data = config.data
        if data.format != "hf":
            raise ForensicsError(f"{argv[1]}: data.format is {data.format}, not hf")
        if data.files is not None:
            files = resolve_files(list(data.files), config=config.source)
        else:
            files = save_to_disk_files(data.path, config=config.source)
        base = Path(argv[1]).resolve().parent
        print(yaml.safe_dump({"shards": record_shards(files, base=base)}, sort_keys=False), end="")
    except ForensicsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
