"""Write small MDS streams (index.json + shards) laid out as streaming's MDSWriter lays them out
(format/mds/writer.py: columns in sorted name order, str as UTF-8, int as int64; see mds.py for
the byte layout), for tests, demos and benchmarks that must not need the streaming library. The
oracle tests read these files with the real StreamingDataset, which checks the layout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np


def write_mds(folder: Path, rows: list[dict[str, Any]], shard_samples: list[int]) -> Path:
    """Write `rows` (dicts of str / int values, the same keys in every row) as shards of the
    given sample counts; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    if sum(shard_samples) != len(rows):
        raise ValueError("shard sizes must add up to the rows")
    names = sorted(rows[0])
    encodings = ["int" if isinstance(rows[0][n], int) else "str" for n in names]
    sizes = [8 if e == "int" else None for e in encodings]
    shards, start = [], 0
    for k, n in enumerate(shard_samples):
        bodies = []
        for row in rows[start : start + n]:
            head, body = [], []
            for name, enc in zip(names, encodings, strict=True):
                if enc == "int":
                    body.append(np.int64(row[name]).tobytes())
                else:
                    data = str(row[name]).encode("utf-8")
                    head.append(len(data))
                    body.append(data)
            bodies.append(np.array(head, "<u4").tobytes() + b"".join(body))
        start += n
        offsets = 4 * (n + 2) + np.concatenate([[0], np.cumsum([len(b) for b in bodies])])
        data = np.uint32(n).tobytes() + offsets.astype("<u4").tobytes() + b"".join(bodies)
        basename = f"shard.{k:05d}.mds"
        (folder / basename).write_bytes(data)
        shards.append(
            {
                "column_encodings": encodings,
                "column_names": names,
                "column_sizes": sizes,
                "compression": None,
                "format": "mds",
                "hashes": [],
                "raw_data": {"basename": basename, "bytes": len(data), "hashes": {}},
                "samples": n,
                "size_limit": 1 << 26,
                "version": 2,
                "zip_data": None,
            }
        )
    (folder / "index.json").write_text(json.dumps({"shards": shards, "version": 2}))
    return folder
