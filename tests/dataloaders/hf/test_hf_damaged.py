"""Damaged Hugging Face data files are one line naming the file, never an internal error or a
second line of the library's log: a truncated or empty file, a file of another schema, a JSONL
file named `.parquet`; streaming and map-style, Parquet, JSON and Arrow files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from dataloaders.run_config import load_config
from forensics.errors import ForensicsError
from forensics.replay import open_replayer
from forensics_testing.repo_paths import REPO_ROOT

pytest.importorskip("datasets")


def _run(folder: Path, kind: str, streaming: bool) -> tuple[Path, list[Path]]:
    """Three shards of 40 rows (text, uid, src) and the run config reading them."""
    import datasets

    folder.mkdir(parents=True)
    files = []
    for s in range(3):
        table = pa.table(
            {
                "text": [f"doc {40 * s + i} alpha beta" for i in range(40)],
                "uid": list(range(40 * s, 40 * s + 40)),
                "src": [f"crawl-{s}"] * 40,
            }
        )
        if kind == "parquet":
            path = folder / f"part-{s}.parquet"
            pq.write_table(table, path, row_group_size=16)
        elif kind == "json":
            path = folder / f"part-{s}.jsonl"
            path.write_text("".join(json.dumps(r) + "\n" for r in table.to_pylist()))
        else:
            path = folder / f"part-{s}.arrow"
            with pa.ipc.new_stream(path, table.schema) as writer:
                for batch in table.to_batches(max_chunksize=13):
                    writer.write_batch(batch)
        files.append(path)
    data = {"format": "hf", "files": [p.name for p in files], "provenance_fields": ["src"]}
    data |= {"streaming": streaming, "seed": 1, "per_device_batch_size": 4}
    if streaming:
        data["datasets_version"] = datasets.__version__
    raw = {"data": data, "training": {"global_batch_size": 4, "train_iters": 20}}
    (folder / "run.yaml").write_text(yaml.safe_dump(raw))
    return folder / "run.yaml", files


def _truncate(path: Path) -> None:
    """Cut in the middle of a value (a JSONL cut between two lines still parses: only the
    recorded shard sizes, `forensics record`, tell that apart)."""
    data = path.read_bytes()
    cut = len(data) // 2
    if path.suffix == ".jsonl":
        cut = data.index(b'"src": "', cut) + 9
    path.write_bytes(data[:cut])


def _other_schema(path: Path) -> None:
    rows = [{"body": "x y", "n": i} for i in range(40)]
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _jsonl_named_parquet(path: Path) -> None:
    path.write_text(
        "".join(json.dumps({"text": "a", "uid": i, "src": "x"}) + "\n" for i in range(40))
    )


CASES = [
    ("parquet", "truncated", _truncate, "not a readable Parquet file"),
    ("parquet", "empty", lambda p: p.write_bytes(b""), "not a readable Parquet file"),
    ("parquet", "other-schema", _other_schema, "has columns ['body', 'n'], but"),
    ("parquet", "jsonl-named-parquet", _jsonl_named_parquet, "not a readable Parquet file"),
    ("json", "truncated", _truncate, "cannot read it as json: JSON parse error"),
    ("json", "empty", lambda p: p.write_bytes(b""), "empty file (0 bytes)"),
    ("json", "other-schema", _other_schema, "'body', 'n']"),
    ("arrow", "truncated", _truncate, "cannot read it as arrow"),
]


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "map-style"])
@pytest.mark.parametrize(
    ("kind", "what", "damage", "needle"), CASES, ids=[c[0] + c[1] for c in CASES]
)
def test_a_damaged_data_file_is_refused_naming_it(
    tmp_path: Path, kind: str, what: str, damage, needle: str, streaming: bool
) -> None:
    config, files = _run(tmp_path / "run", kind, streaming)
    damage(files[1])
    with pytest.raises(ForensicsError) as err:
        open_replayer(load_config(config)).replay(1, 20, text=True, progress=False)
    message = str(err.value)
    assert "\n" not in message and str(files[1]) in message and needle in message, message


def test_the_command_says_one_line(tmp_path: Path) -> None:
    """datasets logs the file it could not read before raising: that line is not shown."""
    config, files = _run(tmp_path / "run", "parquet", True)
    _truncate(files[1])
    env = os.environ | {"PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "forensics.cli", "replay", "--config", str(config), "--step", "10",
         "--window", "5", "--out", str(tmp_path / "w.parquet")],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: {files[1]}: not a readable Parquet file"), lines[0]
