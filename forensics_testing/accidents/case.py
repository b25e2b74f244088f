"""One accident (a bad input and the command it is given to), the edits that make bad inputs
from a copy of a run, and the checks of a good answer."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dataloaders.run_config import load_config
from forensics.replay import open_replayer


@dataclass
class Accident:
    """One bad input: `setup` edits the run copy, `argv` follows `forensics`."""

    name: str
    argv: list[str]
    setup: Callable[[Path], Any] | None = None
    expect: str = "refuse"  # refuse | ok | any (either a clean refusal or a good answer)
    check: Callable[[Path, subprocess.CompletedProcess], str | None] | None = None
    outputs: tuple[str, ...] = ()  # globs (relative to the run) an ok run may create or replace
    needle: str | None = None  # a refusal must say this (the problem)
    names: str | None = None  # ... and name this (the file, or the flag, it refuses)
    file_limit: int | None = None  # bytes a file may grow to (RLIMIT_FSIZE): a full disk
    kept: tuple[str, ...] = ()  # globs a command that exits 2 may leave: a record of what failed


@dataclass
class Verdict:
    accident: Accident
    rc: int | None
    seconds: float
    problems: dict[str, str] = field(default_factory=dict)


# -- edits of a run copy ------------------------------------------------------------------


def edit_yaml(fn: Callable[[dict], Any], name: str = "forensics.yaml") -> Callable[[Path], None]:
    """An edit of the run config (parsed, changed, written back)."""

    def apply(run: Path) -> None:
        cfg = yaml.safe_load((run / name).read_text())
        fn(cfg)
        (run / name).write_text(yaml.safe_dump(cfg, sort_keys=False))

    return apply


def write(path: str, content: str | bytes) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        target = run / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)

    return apply


def both(*edits: Callable[[Path], Any]) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        for e in edits:
            e(run)

    return apply


def idx_poke(prefix: str, what: str) -> Callable[[Path], None]:
    """Damage `prefix`.idx: a middle pointer, a middle length, the dtype code, truncation."""

    def apply(run: Path) -> None:
        path = run / f"{prefix}.idx"
        data = bytearray(path.read_bytes())
        s, _ = struct.unpack_from("<QQ", data, 18)
        header = 34
        if what == "pointer":
            at = header + 4 * s + 8 * (s // 2)
            (value,) = struct.unpack_from("<q", data, at)
            struct.pack_into("<q", data, at, value + 2)
        elif what == "length":
            at = header + 4 * (s // 2)
            (value,) = struct.unpack_from("<i", data, at)
            struct.pack_into("<i", data, at, value + 1)
        elif what == "dtype":
            data[17] = 3 if data[17] == 8 else 8  # uint16 <-> int16: the same width
        elif what == "float":
            data[17] = 7 if data[17] in (4,) else 6
        elif what == "truncate":
            del data[len(data) // 2 :]
        elif what == "magic":
            data[0:4] = b"JUNK"
        elif what == "docs":  # a middle document boundary moved past its neighbour
            at = header + 12 * s + 8 * 3
            struct.pack_into("<q", data, at, s + 5)
        path.write_bytes(bytes(data))

    return apply


def truncate(path: str, keep: float) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        data = (run / path).read_bytes()
        (run / path).write_bytes(data[: int(len(data) * keep)])

    return apply


def swap(a: str, b: str) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        shutil.copy(run / b, run / a)

    return apply


ROOT = os.geteuid() == 0  # permissions do not stop root: read-only accidents are left out


def chmod(path: str, mode: int) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        (run / path).mkdir(parents=True, exist_ok=True)
        os.chmod(run / path, mode)

    return apply


def edit_skip(fn: Callable[[dict], Any], src: str = "spike/skip.json") -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        data = json.loads((run / src).read_text())
        fn(data)
        (run / src).write_text(json.dumps(data))

    return apply


def setitem(d: dict, path: str, value: Any) -> None:
    keys = path.split(".")
    for k in keys[:-1]:
        d = d[k] if not isinstance(d, list) else d[int(k)]
    if isinstance(d, list):
        d[int(keys[-1])] = value
    else:
        d[keys[-1]] = value


def delitem(d: dict, path: str) -> None:
    keys = path.split(".")
    for k in keys[:-1]:
        d = d[k]
    del d[keys[-1]]


def stage0(cfg: dict) -> dict:
    """The first data stage (or the single blend) of a Megatron config."""
    return cfg["data"]["stages"][0] if "stages" in cfg["data"] else cfg["data"]


# -- checks of a good answer ----------------------------------------------------------------


def not_healthy(run: Path, proc: subprocess.CompletedProcess) -> str | None:
    out = run / "t"
    summary = json.loads((out / "summary.json").read_text())
    if summary["status"] == "healthy":
        return "HEALTHY for a run that diverged"
    return None


def literal_names(*names: str) -> Callable[[Path, subprocess.CompletedProcess], str | None]:
    def check(run: Path, proc: subprocess.CompletedProcess) -> str | None:
        missing = [n for n in names if n not in proc.stdout]
        return f"names not shown literally: {missing}" if missing else None

    return check


def says(text: str) -> Callable[[Path, subprocess.CompletedProcess], str | None]:
    def check(run: Path, proc: subprocess.CompletedProcess) -> str | None:
        joined = " ".join((proc.stdout + proc.stderr).split())
        return None if text in joined else f"does not say {text!r}"

    return check


def manifest_column(run: Path, manifest: str, column: str) -> None:
    import polars as pl

    table = pl.read_parquet(run / manifest)
    table.with_columns(pl.lit("7").alias(column)).write_parquet(run / manifest)


def manifest_rows(run: Path, manifest: str, rows: int) -> None:
    import polars as pl

    pl.read_parquet(run / manifest).head(rows).write_parquet(run / manifest)


def short_shuffle(run: Path) -> None:
    """Megatron's cache for the first dataset, with shuffle_index.npy cut to half."""
    import numpy as np

    cache = run / "data-cache"
    cache.mkdir()
    config = load_config(run / "forensics.yaml")
    replayer = open_replayer(config)
    source = replayer.stage(len(replayer.stage_specs) - 1).sources[0]  # the spike's stage
    base = cache / "x-GPTDataset-train-"
    Path(f"{base}description.txt").write_text(json.dumps(source.description))
    np.save(f"{base}document_index.npy", np.asarray(source.document_index))
    np.save(f"{base}sample_index.npy", source.full_sample_index())
    np.save(f"{base}shuffle_index.npy", np.asarray(source.shuffle_index)[: len(source) // 2])
    cfg = yaml.safe_load((run / "forensics.yaml").read_text())
    cfg["data"]["cache_path"] = "data-cache"
    (run / "forensics.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
