"""The library side of scripts/bench_mosaic_replay.py, run by the oracle venv (.venv-mosaic):
iterate the real StreamingDataset + StreamingDataLoader up to a given batch and time it.

    .venv-mosaic/bin/python scripts/bench_mosaic_library.py SPEC.json
SPEC: {"local": dir, "dataset": StreamingDataset kwargs, "num_workers": int, "batches": N,
       "keep_from": first batch (1-based) whose uids to keep, "out": json path}
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "oracles"))
from mosaic_import import import_streaming_base  # noqa: E402


def _uids(samples: list[dict]) -> dict[str, list[int]]:
    return {"uid": [int(s["uid"]) for s in samples]}


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    start = time.perf_counter()
    base = import_streaming_base()
    imported = time.perf_counter()
    dataset = base.StreamingDataset(local=spec["local"], **spec["dataset"])
    loader = base.StreamingDataLoader(
        dataset,
        batch_size=spec["dataset"]["batch_size"],
        num_workers=spec["num_workers"],
        collate_fn=_uids,
    )
    kept, seen = [], 0
    while seen < spec["batches"]:
        for batch in loader:
            seen += 1
            if seen >= spec["keep_from"]:
                kept.append(batch["uid"])
            if seen == spec["batches"]:
                break
    end = time.perf_counter()
    out = {"import_s": imported - start, "iterate_s": end - imported, "batches": kept}
    Path(spec["out"]).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
