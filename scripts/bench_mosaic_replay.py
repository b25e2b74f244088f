"""Benchmark: replaying a MosaicML streaming run, next to iterating the real library.

Writes an MDS stream of N samples (default 400k, ~100 bytes of text each, 40 shards), then, in
one run: our replay of a 300-iteration window at global batch 1024 (iterations 301-600, across
the epoch boundary) in a fresh process from nothing (empty cache), again from the cache, with
and without the samples' text; and the real StreamingDataset + StreamingDataLoader
(mosaicml-streaming 0.13.0, the oracle venv) iterated to the same point, which is what finding
those samples costs without a replay. The library's window must equal ours sample for sample.

    .venv/bin/python scripts/bench_mosaic_replay.py [--samples 400000] [--workers 0]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from forensics_testing.mds import write_mds

ROOT = Path(__file__).resolve().parents[1]

import numpy as np  # noqa: E402
import yaml  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

WORDS = np.array("the of and to in data model loss batch token shard web crawl page".split())
BATCH, FIRST, LAST = 1024, 301, 600
ARGS = {"batch_size": BATCH, "shuffle": True, "shuffle_seed": 9176}  # py1e, streaming's default

REPLAY = """
import json, sys, time
t0 = time.perf_counter()
from dataloaders.run_config import load_config
from forensics.replay import open_replayer
r = open_replayer(load_config(sys.argv[1]))
t = r.replay({first}, {last}, text=sys.argv[2] == "text")
t1 = time.perf_counter()
uids = t["doc_id"].to_list()
print(json.dumps({{"seconds": t1 - t0, "rows": t.height, "uids": uids}}))
"""


def _write(folder: Path, samples: int, shards: int) -> None:
    if (folder / "index.json").is_file():
        return
    rng = np.random.default_rng(0)
    words = rng.choice(WORDS, size=(samples, 20))
    rows = [
        {"text": " ".join(w), "uid": i, "url": f"https://x{i % 97}.org/{i}"}
        for i, w in enumerate(words)
    ]
    per = [samples // shards] * shards
    per[-1] += samples - sum(per)
    write_mds(folder, rows, per)


def _replay(config: Path, cache: Path, text: bool) -> dict:
    env = {**os.environ, "FORENSICS_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    code = REPLAY.format(first=FIRST, last=LAST)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, str(config), "text" if text else "keys"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["wall"] = time.perf_counter() - start
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=400_000)
    parser.add_argument("--shards", type=int, default=40)
    parser.add_argument("--workers", type=int, default=0, help="library DataLoader workers")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "bench-mds")
    args = parser.parse_args()

    folder = args.workdir / f"web-{args.samples}"
    _write(folder, args.samples, args.shards)
    config = args.workdir / f"run-{args.samples}-{args.workers}.yaml"
    data = {"format": "mosaic-streaming", "streams": [{"local": str(folder), "name": "web"}]}
    data.update(ARGS, num_workers=args.workers, provenance_fields=["url"])
    run = {"data": data, "training": {"global_batch_size": BATCH, "train_iters": LAST}}
    config.write_text(yaml.safe_dump(run))

    rows = []
    with tempfile.TemporaryDirectory() as cache:
        cold = _replay(config, Path(cache), text=False)
        rows.append(("replay keys, from nothing (fresh process)", cold))
        rows.append(("replay keys, from cache", _replay(config, Path(cache), text=False)))
        rows.append(("replay with text, from cache", _replay(config, Path(cache), text=True)))

    oracle = subprocess.run(
        ["bash", str(ROOT / "scripts" / "mosaic_oracle_env.sh")], capture_output=True, text=True
    )
    library = None
    if oracle.returncode == 0:
        python = oracle.stdout.strip().splitlines()[-1]
        with tempfile.TemporaryDirectory() as tmp:
            spec = {
                "local": str(folder),
                "dataset": ARGS,
                "num_workers": args.workers,
                "batches": LAST,
                "keep_from": FIRST,
                "out": str(Path(tmp) / "lib.json"),
            }
            (Path(tmp) / "spec.json").write_text(json.dumps(spec))
            start = time.perf_counter()
            subprocess.run(
                [python, str(ROOT / "scripts" / "bench_mosaic_library.py"), f"{tmp}/spec.json"],
                check=True,
            )
            wall = time.perf_counter() - start
            library = json.loads((Path(tmp) / "lib.json").read_text())
            library["wall"] = wall
        same = [u for b in library["batches"] for u in b] == cold["uids"]
        assert same, "the library's window differs from the replay"

    table = Table(
        title=f"MosaicML streaming: window {FIRST}-{LAST} at global batch {BATCH}, "
        f"{args.samples:,} samples, {args.workers} library workers"
    )
    for col in ("what", "seconds", "samples", "x faster than the library"):
        table.add_column(col, justify="left" if col == "what" else "right")
    anchor = library["wall"] if library else None
    for what, out in rows:
        speed = f"{anchor / out['wall']:.1f}" if anchor else "-"
        table.add_row(what, f"{out['wall']:.2f}", f"{out['rows']:,}", speed)
    if library:
        table.add_row(
            f"library: StreamingDataset + DataLoader to batch {LAST} (import "
            f"{library['import_s']:.1f} s, iterate {library['iterate_s']:.1f} s)",
            f"{library['wall']:.2f}",
            f"{LAST * BATCH:,}",
            "1.0 (anchor)",
        )
    else:
        table.add_row("library (oracle venv not built: no anchor)", "-", "-", "-")
    Console().print(table)


if __name__ == "__main__":
    main()
