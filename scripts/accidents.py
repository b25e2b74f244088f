"""The accident battery: bad inputs a careless or unlucky user gives every command, each on a
fresh copy of a real run, and what the command did with them.

    .venv/bin/python scripts/accidents.py [--base demo-run] [--jobs 2] [--only PATTERN]

Each accident edits a copy of the run (a truncated .idx, a hand-edited skip.json, `seq_length:
10000000`, ...), runs one `forensics` command in it, and is judged by what a user needs:

- traceback     an internal error (exit 3), a Python traceback, or an unexpected exit status
- hang          no answer within the time limit (a command must answer in seconds)
- silent wrong  exit 0 where a refusal was due, or an answer its check finds wrong
- half-written  a failed command left new files behind, or any command changed a file it was
                not asked to write (every pre-existing file is compared byte for byte; a
                spike output's `.cache/` is a cache and may change)
- not one line  a refusal that is not exactly one `error:` line
- refused wrongly  a refusal of an input that is fine

Prints one line per accident that went wrong, then the counts (the closing note of issue 12).
Exit status 1 when any of the counts above is not zero. `--base` is a run directory such as
`bash scripts/demo.sh` builds (demo-run/); without one, a small run is generated first.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import fnmatch
import hashlib
import json
import os
import re
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 90  # generous for a loaded 2-core machine; the commands answer in seconds
MEMORY_LIMIT = 8 << 30  # address space per command (torch alone maps ~3 GB)


@dataclass
class Accident:
    """One bad input: `setup` edits the run copy, `argv` follows `forensics`."""

    name: str
    argv: list[str]
    setup: Callable[[Path], Any] | None = None
    expect: str = "refuse"  # refuse | ok | any (either a clean refusal or a good answer)
    check: Callable[[Path, subprocess.CompletedProcess], str | None] | None = None
    outputs: tuple[str, ...] = ()  # globs (relative to the run) an ok run may create or replace
    needle: str | None = None  # a refusal must say this
    file_limit: int | None = None  # bytes a file may grow to (RLIMIT_FSIZE): a full disk


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


# -- the battery ----------------------------------------------------------------------------


def battery(info: dict[str, Any]) -> list[Accident]:
    """Every accident, by command. `info`: facts of the base run (step, checkpoints, names)."""
    a: list[Accident] = []
    names = _names(info)
    for group in GROUPS:
        group(a.append, info, names)
    if ROOT:
        a = [x for x in a if "read-only" not in x.name]
    return a


def _names(info: dict[str, Any]) -> dict[str, Any]:
    """The paths and command lines every group of accidents shares."""
    step, end = info["step"], info["train_iters"]
    spike = ["spike", "--step", str(step), "--window", "20", "--embed-cap", "0", "--quiet"]
    replay = ["replay", "--config", "forensics.yaml", "--step", str(step), "--window", "2"]
    log = "logs/train.log"
    first = info["first_prefix"]  # e.g. data/prose_text_document
    web = info["web_prefix"]
    # ---- triage
    tri = ["triage", log, "--out", "t"]
    # ---- manifest
    jsonl = "docs.jsonl"
    docs = "".join(
        json.dumps({"text": f"d{i}", "url": f"u{i}", "source": "s"}) + "\n"
        for i in range(info["first_docs"])
    )
    mk = write(jsonl, docs)
    man = ["manifest", jsonl, "--fields", "url"]
    # ---- check-skip
    cs = ["check-skip", "spike/skip.json", "--config", "forensics.yaml"]
    # ---- scan
    sc = ["scan", "--from", str(step - 10), "--to", str(step), "--out", "sc", "--quiet"]
    # ---- watch (one poll)
    wa = ["watch", log, "--max-polls", "1", "--interval", "0.1", "--no-live", "--out", "w"]
    # ---- rescore (the cheap refusals)
    rs = ["rescore", "--step", str(step), "--window", "5", "--out", "r"]
    return {
        "step": step,
        "end": end,
        "spike": spike,
        "replay": replay,
        "log": log,
        "first": first,
        "web": web,
        "tri": tri,
        "jsonl": jsonl,
        "docs": docs,
        "mk": mk,
        "man": man,
        "cs": cs,
        "sc": sc,
        "wa": wa,
        "rs": rs,
    }


def _group_01(add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]) -> None:
    """Accidents, part 1 (the battery in order: triage, replay, manifest, score, spike,
    check-skip, scan, full disk, watch, rescore)."""
    log, tri = names["log"], names["tri"]
    add(Accident("triage: missing log", ["triage", "nope.log", "--out", "t"]))
    add(Accident("triage: empty log", tri, write(log, "")))
    add(Accident("triage: binary log", tri, write(log, bytes(range(256)) * 50)))
    add(
        Accident(
            "triage: NaN-only log", tri, write(log, "step,loss\n1,nan\n2,nan\n"), needle="no finite"
        )
    )
    add(
        Accident(
            "triage: log truncated mid-line",
            tri,
            truncate(log, 0.5),
            expect="ok",
            outputs=("t/**",),
        )
    )
    nan_tail = "".join(
        f" iteration {i:8d}/ 3000 | lm loss: {3 + 1 / i:.6E} | grad norm: 1.0 |\n"
        for i in range(1, 1001)
    ) + "".join(
        f" iteration {i:8d}/ 3000 | lm loss: nan | grad norm: nan |\n" for i in (1001, 1002)
    )
    add(
        Accident(
            "triage: loss turns nan after 1000 steps",
            tri,
            write(log, nan_tail),
            expect="ok",
            check=not_healthy,
            outputs=("t/**",),
        )
    )
    skipped = (
        "".join(
            f" iteration {i:8d}/ 3000 | lm loss: {3 + 1 / i:.6E} | "
            "number of nan iterations:   0 |\n"
            for i in range(1, 1001)
        )
        + " iteration     1001/ 3000 | number of nan iterations:   1 |\n"
    )
    add(
        Accident(
            "triage: loss left out, nan counter 1",
            tri,
            write(log, skipped),
            expect="ok",
            check=not_healthy,
            outputs=("t/**",),
        )
    )
    add(Accident("triage: --out is the log", ["triage", log, "--out", log]))
    add(
        Accident(
            "triage: --out holds a spike report",
            ["triage", log, "--out", "spike"],
            needle="already holds",
        )
    )
    add(Accident("triage: --out existing triage", ["triage", log, "--out", "triage"]))
    add(Accident("triage: --format bogus", [*tri, "--format", "bogus"]))
    add(Accident("triage: --format tensorboard on text", [*tri, "--format", "tensorboard"]))
    add(Accident("triage: --format jsonl on text", [*tri, "--format", "jsonl"]))


def _group_02(add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]) -> None:
    """Accidents, part 2 (the battery in order: triage, replay, manifest, score, spike,
    check-skip, scan, full disk, watch, rescore)."""
    log, tri = names["log"], names["tri"]
    add(
        Accident(
            "triage: --format hf-trainer-state on text", [*tri, "--format", "hf-trainer-state"]
        )
    )
    add(Accident("triage: --checkpoints a,b", [*tri, "--checkpoints", "a,b"]))
    add(Accident("triage: --checkpoints empty dir", [*tri, "--checkpoints", "data"]))
    add(Accident("triage: --recovery-window 0", [*tri, "--recovery-window", "0"]))
    add(Accident("triage: --plateau-steps -5", [*tri, "--plateau-steps", "-5"]))
    add(
        Accident(
            "triage: --config missing",
            [*tri, "--config", "nope.yaml"],
            expect="any",
            outputs=("t/**",),
        )
    )
    names = "step,loss,loss/$x,loss/:book:,loss/[red]x[/red]\n" + "".join(
        f"{i},{3 + 1 / i},{3 + 1 / i},{3 + 1 / i},{3 + 1 / i}\n" for i in range(1, 400)
    )
    add(
        Accident(
            "triage: $, :book: and [red] in curve names",
            ["triage", "n.csv", "--out", "t"],
            write("n.csv", names),
            expect="ok",
            check=literal_names("$x", ":book:", "[red]x[/red]"),
            outputs=("t/**",),
        )
    )
    add(Accident("triage: read-only --out", ["triage", log, "--out", "ro/t"], chmod("ro", 0o555)))
    add(Accident("triage: empty directory as log", ["triage", "data", "--out", "t"]))
    add(
        Accident(
            "triage: CSV header only",
            ["triage", "h.csv", "--out", "t"],
            write("h.csv", "step,loss\n"),
        )
    )
    add(
        Accident(
            "triage: CSV without a loss",
            ["triage", "h.csv", "--out", "t"],
            write("h.csv", "step,lr\n1,0.1\n2,0.1\n"),
        )
    )
    add(
        Accident(
            "triage: JSONL with a bad line",
            ["triage", "j.jsonl", "--out", "t"],
            write(
                "j.jsonl",
                "".join(f'{{"step": {i}, "loss": {3 + 1 / i}}}\n' for i in range(1, 300))
                + "{oops\n",
            ),
            expect="ok",
            check=says("line 300"),
            outputs=("t/**",),
        )
    )


def _group_03(add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]) -> None:
    """Accidents, part 3 (the battery in order: triage, replay, manifest, score, spike,
    check-skip, scan, full disk, watch, rescore)."""
    step, end, replay, web, tri = (
        names["step"],
        names["end"],
        names["replay"],
        names["web"],
        names["tri"],
    )
    add(
        Accident(
            "triage: trainer_state with a list step",
            ["triage", "trainer_state.json", "--out", "t"],
            write("trainer_state.json", json.dumps({"log_history": [{"step": [1], "loss": 2}]})),
        )
    )
    add(
        Accident(
            "triage: 1e999 losses",
            ["triage", "h.csv", "--out", "t"],
            write("h.csv", "step,loss\n" + "".join(f"{i},1e999\n" for i in range(1, 50))),
        )
    )
    add(
        Accident(
            "triage: --seq-length -1", [*tri, "--seq-length", "-1"], expect="any", outputs=("t/**",)
        )
    )
    add(
        Accident(
            "triage: corrupt TensorBoard file",
            ["triage", "tb", "--out", "t"],
            write("tb/events.out.tfevents.1.host", b"\x00" * 100),
        )
    )
    # ---- replay
    add(Accident("replay: --step 0", [*replay[:4], "0", "--out", "w.parquet"]))
    add(Accident("replay: --step past the end", [*replay[:4], str(end + 1), "--out", "w.parquet"]))
    add(Accident("replay: --window 0", [*replay[:6], "0", "--out", "w.parquet"]))
    add(
        Accident(
            "replay: --window past iteration 1", [*replay[:6], str(step + 5), "--out", "w.parquet"]
        )
    )
    add(Accident("replay: --out the .idx", [*replay, "--out", f"{web}.idx"]))
    add(Accident("replay: --out the .bin", [*replay, "--out", f"{web}.bin"]))
    add(Accident("replay: --out the manifest", [*replay, "--out", info["manifest"]]))
    add(Accident("replay: --out the config", [*replay, "--out", "forensics.yaml"]))
    add(Accident("replay: --out the tokenizer", [*replay, "--out", "tokenizer.json"]))
    add(
        Accident(
            "replay: --out an existing file",
            [*replay, "--out", "x.parquet"],
            write("x.parquet", "mine"),
        )
    )
    add(Accident("replay: --out a directory", [*replay, "--out", "data"]))
    add(Accident("replay: --out not .parquet", [*replay, "--out", "w.csv"]))
    add(
        Accident(
            "replay: --out in a read-only dir",
            [*replay, "--out", "ro/w.parquet"],
            chmod("ro", 0o555),
        )
    )
    add(
        Accident(
            "replay: --out in a missing dir",
            [*replay, "--out", "new/dir/w.parquet"],
            expect="any",
            outputs=("new/**",),
        )
    )


def _group_04(add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]) -> None:
    """Accidents, part 4 (the battery in order: triage, replay, manifest, score, spike,
    check-skip, scan, full disk, watch, rescore)."""
    replay = names["replay"]
    add(
        Accident(
            "replay: config missing",
            ["replay", "--config", "nope.yaml", "--step", "5", "--out", "w.parquet"],
        )
    )
    add(
        Accident(
            "replay: config not YAML",
            [*replay, "--out", "w.parquet"],
            write("forensics.yaml", "data: [unclosed\n"),
        )
    )
    add(
        Accident(
            "replay: config binary",
            [*replay, "--out", "w.parquet"],
            write("forensics.yaml", bytes(range(256))),
        )
    )
    add(
        Accident(
            "replay: config is a list",
            [*replay, "--out", "w.parquet"],
            write("forensics.yaml", "- a\n- b\n"),
        )
    )
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{b}: &{b} [{', '.join([f'*{c}'] * 9)}]\n"
        for c, b in zip("abcdefgh", "bcdefghi", strict=True)
    )
    add(
        Accident(
            "replay: YAML alias bomb",
            [*replay, "--out", "w.parquet"],
            write("forensics.yaml", bomb),
        )
    )
    add(
        Accident(
            "replay: 12 MB YAML",
            [*replay, "--out", "w.parquet"],
            write("forensics.yaml", "".join(f"key{i}: {i}\n" for i in range(1_000_000))),
        )
    )
    for key, value, needle in [
        ("seq_length", 10_000_000, "seq_length"),
        ("seq_length", 0, None),
        ("seq_length", -5, None),
        ("seq_length", "4096", None),
        ("seed", True, None),
        ("seed", -1, None),
        ("seed", 2**70, None),
        ("split", "-98,2,0", None),
        ("split", "0,0,0", None),
        ("split", 98, None),
        ("format", "nemo", None),
    ]:
        add(
            Accident(
                f"replay: data.{key}: {value!r}",
                [*replay, "--out", "w.parquet"],
                edit_yaml(lambda c, k=key, v=value: c["data"].__setitem__(k, v)),
                needle=needle,
            )
        )


def _group_05(add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]) -> None:
    """Accidents, part 5 (the battery in order: triage, replay, manifest, score, spike,
    check-skip, scan, full disk, watch, rescore)."""
    replay = names["replay"]
    for key, value in [
        ("global_batch_size", 0),
        ("global_batch_size", 10**12),
        ("train_iters", -1),
        ("train_iters", 10**15),
        ("train_iters", 1.5),
    ]:
        add(
            Accident(
                f"replay: training.{key}: {value!r}",
                [*replay, "--out", "w.parquet"],
                edit_yaml(lambda c, k=key, v=value: c["training"].__setitem__(k, v)),
            )
        )
    add(
        Accident(
            "replay: weight inf",
            [*replay, "--out", "w.parquet"],
            edit_yaml(lambda c: stage0(c)["blend"][0].__setitem__("weight", float("inf"))),
        )
    )
    add(
        Accident(
            "replay: weight -1",
            [*replay, "--out", "w.parquet"],
            edit_yaml(lambda c: stage0(c)["blend"][0].__setitem__("weight", -1)),
        )
    )
    add(
        Accident(
            "replay: weight nan",
            [*replay, "--out", "w.parquet"],
            edit_yaml(lambda c: stage0(c)["blend"][0].__setitem__("weight", float("nan"))),
        )
    )
    add(
        Accident(
            "replay: duplicate blend names",
            [*replay, "--out", "w.parquet"],
            edit_yaml(
                lambda c: stage0(c)["blend"][1].__setitem__(
                    "name", stage0(c)["blend"][0].get("name", "x")
                )
            ),
        )
    )
    add(
        Accident(
            "replay: empty blend",
            [*replay, "--out", "w.parquet"],
            edit_yaml(lambda c: stage0(c).__setitem__("blend", [])),
        )
    )


def _group_06(add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]) -> None:
    """Accidents, part 6 (the battery in order: triage, replay, manifest, score, spike,
    check-skip, scan, full disk, watch, rescore)."""
    end, replay, first, web = names["end"], names["replay"], names["first"], names["web"]
    if info["stages"]:
        add(
            Accident(
                "replay: stage after the end",
                [*replay, "--out", "w.parquet"],
                edit_yaml(
                    lambda c: c["data"]["stages"][1].__setitem__("start_iteration", end + 10)
                ),
            )
        )
        add(
            Accident(
                "replay: stages out of order",
                [*replay, "--out", "w.parquet"],
                edit_yaml(lambda c: c["data"]["stages"].reverse()),
            )
        )
    add(
        Accident(
            "replay: unknown key",
            [*replay, "--out", "w.parquet"],
            edit_yaml(lambda c: c["data"].__setitem__("sead", 5)),
        )
    )
    add(
        Accident(
            "replay: prefix missing",
            [*replay, "--out", "w.parquet"],
            edit_yaml(lambda c: stage0(c)["blend"][0].__setitem__("prefix", "data/nope")),
        )
    )
    add(
        Accident(
            "replay: .bin missing",
            [*replay, "--out", "w.parquet"],
            lambda r: (r / f"{first}.bin").unlink(),
        )
    )
    add(
        Accident(
            "replay: .bin truncated", [*replay, "--out", "w.parquet"], truncate(f"{first}.bin", 0.9)
        )
    )
    add(
        Accident(
            "replay: .bin grown",
            [*replay, "--out", "w.parquet"],
            lambda r: open(r / f"{first}.bin", "ab").write(b"\0\0\0\0"),
        )
    )
    add(
        Accident(
            "replay: .idx of another dataset",
            [*replay, "--out", "w.parquet"],
            swap(f"{first}.idx", f"{web}.idx"),
        )
    )
    for what in ("pointer", "length", "truncate", "magic", "docs", "float"):
        add(
            Accident(
                f"replay: .idx {what} damaged",
                [*replay, "--out", "w.parquet"],
                idx_poke(first, what),
            )
        )


def _group_07(add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]) -> None:
    """Accidents, part 7 (the battery in order: triage, replay, manifest, score, spike,
    check-skip, scan, full disk, watch, rescore)."""
    replay, first = names["replay"], names["first"]
    add(
        Accident(
            "replay --text: .idx dtype code swapped at the same width",
            [*replay, "--text", "--out", "w.parquet"],
            idx_poke(first, "dtype"),
            expect="any",  # uint16 <-> int16: the same ids below 32768, else refused by value
            outputs=("w.parquet",),
        )
    )
    add(
        Accident(
            "replay: split '98,2' (Megatron pads it with 0)",
            [*replay, "--out", "w.parquet"],
            edit_yaml(lambda c: c["data"].__setitem__("split", "98,2")),
            expect="ok",
            outputs=("w.parquet",),
        )
    )
    add(
        Accident(
            "replay: .idx rewritten, same size and mtime, cache warm",
            [*replay, "--out", "w.parquet"],
            idx_poke(first, "pointer"),
        )
    )
    add(
        Accident(
            "replay: manifest with a 'dataset' column",
            [*replay, "--out", "w.parquet"],
            lambda r: _manifest_column(r, info["manifest"], "dataset"),
        )
    )
    add(
        Accident(
            "replay: manifest with an 'iteration' column",
            [*replay, "--out", "w.parquet"],
            lambda r: _manifest_column(r, info["manifest"], "iteration"),
        )
    )
    add(
        Accident(
            "replay: manifest with a 'text' column",
            [*replay, "--text", "--out", "w.parquet"],
            lambda r: _manifest_column(r, info["manifest"], "text"),
        )
    )
    add(
        Accident(
            "replay: manifest short",
            [*replay, "--out", "w.parquet"],
            lambda r: _manifest_rows(r, info["manifest"], 5),
        )
    )
    add(
        Accident(
            "replay: manifest not parquet",
            [*replay, "--out", "w.parquet"],
            write(info["manifest"], "not parquet"),
        )
    )


def _group_08(add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]) -> None:
    """Accidents, part 8 (the battery in order: triage, replay, manifest, score, spike,
    check-skip, scan, full disk, watch, rescore)."""
    replay, first, jsonl, mk, man = (
        names["replay"],
        names["first"],
        names["jsonl"],
        names["mk"],
        names["man"],
    )
    add(
        Accident(
            "replay --text: tokenizer missing",
            [*replay, "--text", "--out", "w.parquet"],
            lambda r: (r / "tokenizer.json").unlink(),
        )
    )
    add(
        Accident(
            "replay --text: tokenizer garbage",
            [*replay, "--text", "--out", "w.parquet"],
            write("tokenizer.json", "{not json"),
        )
    )
    add(
        Accident(
            "replay: --megatron-args @binary",
            ["replay", "--megatron-args", "@bin.args", "--step", "5", "--out", "w.parquet"],
            write("bin.args", bytes(range(256))),
        )
    )
    add(
        Accident(
            "replay: --megatron-args nonsense",
            ["replay", "--megatron-args", "--foo bar", "--step", "5", "--out", "w.parquet"],
        )
    )
    add(
        Accident(
            "replay: --megatron-args @missing",
            ["replay", "--megatron-args", "@nope", "--step", "5", "--out", "w.parquet"],
        )
    )
    add(
        Accident(
            "replay: both --config and --megatron-args",
            [*replay, "--megatron-args", "--seq-length 8", "--out", "w.parquet"],
        )
    )
    add(
        Accident(
            "replay: short shuffle_index.npy in the Megatron cache",
            [*replay, "--out", "w.parquet"],
            lambda r: _short_shuffle(r),
        )
    )
    add(
        Accident(
            "replay: a good replay",
            [*replay, "--out", "w.parquet"],
            expect="ok",
            outputs=("w.parquet",),
        )
    )
    add(Accident("manifest: --out the .idx", [*man, "--out", f"{first}.idx"], mk))
    add(Accident("manifest: --out tokenizer.json", [*man, "--out", "tokenizer.json"], mk))
    add(Accident("manifest: --out the config", [*man, "--out", "forensics.yaml"], mk))
    add(Accident("manifest: --out the JSONL", [*man, "--out", jsonl], mk))
    add(Accident("manifest: --out the run's manifest", [*man, "--out", info["manifest"]], mk))


def _group_09(add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]) -> None:
    """Accidents, part 9 (the battery in order: triage, replay, manifest, score, spike,
    check-skip, scan, full disk, watch, rescore)."""
    first, jsonl, mk, man = names["first"], names["jsonl"], names["mk"], names["man"]
    add(
        Accident(
            "manifest: --prefix of the run (writes PREFIX.manifest.parquet)",
            [*man, "--prefix", first],
            mk,
            expect="ok",
            outputs=(f"{first}.manifest.parquet",),
        )
    )
    add(
        Accident(
            "manifest: JSONL missing",
            ["manifest", "nope.jsonl", "--fields", "url", "--out", "m.parquet"],
        )
    )
    add(
        Accident(
            "manifest: JSONL binary", [*man, "--out", "m.parquet"], write(jsonl, bytes(range(256)))
        )
    )
    add(
        Accident(
            "manifest: JSONL bad line 3",
            [*man, "--out", "m.parquet"],
            write(jsonl, '{"url": 1}\n{"url": 2}\n{oops\n'),
            needle=":3",
        )
    )
    add(
        Accident(
            "manifest: JSONL line not an object",
            [*man, "--out", "m.parquet"],
            write(jsonl, '{"url": 1}\n[1, 2]\n'),
        )
    )
    add(
        Accident(
            "manifest: --fields dataset",
            ["manifest", jsonl, "--fields", "dataset", "--out", "m.parquet"],
            mk,
        )
    )
    add(
        Accident(
            "manifest: --fields doc_id",
            ["manifest", jsonl, "--fields", "doc_id", "--out", "m.parquet"],
            mk,
        )
    )
    add(
        Accident(
            "manifest: --fields ''", ["manifest", jsonl, "--fields", "", "--out", "m.parquet"], mk
        )
    )
    add(
        Accident(
            "manifest: --fields url,url",
            ["manifest", jsonl, "--fields", "url,url", "--out", "m.parquet"],
            mk,
            expect="ok",
            outputs=("m.parquet",),
        )
    )


def _group_10(add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]) -> None:
    """Accidents, part 10 (the battery in order: triage, replay, manifest, score, spike,
    check-skip, scan, full disk, watch, rescore)."""
    first, jsonl, mk, man = names["first"], names["jsonl"], names["mk"], names["man"]
    add(
        Accident(
            "manifest: field nobody has",
            ["manifest", jsonl, "--fields", "nope", "--out", "m.parquet"],
            mk,
        )
    )
    add(
        Accident(
            "manifest: --prefix count differs",
            [*man, "--prefix", first, "--out", "m.parquet"],
            write(jsonl, '{"url": 1}\n'),
        )
    )
    add(
        Accident(
            "manifest: --out exists",
            [*man, "--out", "m.parquet"],
            both(mk, write("m.parquet", "mine")),
        )
    )
    add(Accident("manifest: no --out, no --prefix", man, mk))
    # ---- score
    add(Accident("score: input missing", ["score", "nope.parquet", "--out", "s.parquet"]))
    add(
        Accident(
            "score: input not parquet",
            ["score", "x.parquet", "--out", "s.parquet"],
            write("x.parquet", "text"),
        )
    )
    add(
        Accident(
            "score: no text column",
            ["score", info["manifest"], "--out", "s.parquet"],
            needle="text",
        )
    )
    add(
        Accident(
            "score: --out a directory",
            ["score", "d.jsonl", "--out", "data"],
            write("d.jsonl", '{"text": "a"}\n'),
        )
    )
    add(
        Accident(
            "score: --out the input",
            ["score", "d.jsonl", "--out", "d.jsonl"],
            write("d.jsonl", '{"text": "a"}\n'),
        )
    )
    add(
        Accident(
            "score: --out exists",
            ["score", "d.jsonl", "--out", "s.parquet"],
            both(write("d.jsonl", '{"text": "a"}\n'), write("s.parquet", "mine")),
        )
    )


def _group_11(add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]) -> None:
    """Accidents, part 11 (the battery in order: triage, replay, manifest, score, spike,
    check-skip, scan, full disk, watch, rescore)."""
    step, end, spike, first = names["step"], names["end"], names["spike"], names["first"]
    add(
        Accident(
            "score: JSONL bad line 2",
            ["score", "d.jsonl", "--out", "s.parquet"],
            write("d.jsonl", '{"text": "a"}\n{bad\n'),
            needle="2",
        )
    )
    add(
        Accident(
            "score: text not a string",
            ["score", "d.jsonl", "--out", "s.parquet"],
            write("d.jsonl", '{"text": 5}\n{"text": ["a"]}\n'),
            expect="any",
            outputs=("s.parquet",),
        )
    )
    add(
        Accident(
            "score: empty JSONL",
            ["score", "d.jsonl", "--out", "s.parquet"],
            write("d.jsonl", ""),
            expect="any",
            outputs=("s.parquet",),
        )
    )
    add(
        Accident(
            "score: --out the .idx",
            ["score", "d.jsonl", "--out", f"{first}.idx"],
            write("d.jsonl", '{"text": "a"}\n'),
        )
    )
    # ---- spike
    add(Accident("spike: --step 0", ["spike", "--step", "0", "--out", "s"]))
    add(Accident("spike: --step past the end", ["spike", "--step", str(end + 1), "--out", "s"]))
    add(
        Accident(
            "spike: --window past iteration 1",
            [*spike[:3], "--window", str(step + 1), "--out", "s"],
        )
    )
    add(Accident("spike: --out a file", [*spike, "--out", "forensics.yaml"]))
    add(Accident("spike: --out an older run, no --force", [*spike, "--out", "spike"]))
    add(Accident("spike: --out foreign files", [*spike, "--out", "data"]))
    add(Accident("spike: --threshold 2", [*spike, "--threshold", "2", "--out", "s"]))
    add(Accident("spike: --threshold nan", [*spike, "--threshold", "nan", "--out", "s"]))
    add(Accident("spike: --ahead-share -1", [*spike, "--ahead-share", "-1", "--out", "s"]))
    add(Accident("spike: --after -1", [*spike, "--after", "-1", "--out", "s"]))
    add(Accident("spike: --trainer nemo", [*spike, "--trainer", "nemo", "--out", "s"]))
    add(Accident("spike: --baseline nonsense", [*spike, "--baseline", "abc", "--out", "s"]))
    add(Accident("spike: --baseline 5-1", [*spike, "--baseline", "5-1", "--out", "s"]))
    add(
        Accident(
            "spike: --baseline overlapping the window",
            [*spike, "--baseline", f"{step - 5}-{step}", "--out", "s"],
        )
    )
    add(
        Accident(
            "spike: --embed-model missing",
            [*spike[:-3], "--embed-cap", "50", "--embed-model", "nope", "--quiet", "--out", "s"],
        )
    )
    add(Accident("spike: --culprit unknown", [*spike, "--culprit", "s999", "--out", "s"]))
    add(Accident("spike: config missing", [*spike, "--config", "nope.yaml", "--out", "s"]))


def _group_12(add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]) -> None:
    """Accidents, part 12 (the battery in order: triage, replay, manifest, score, spike,
    check-skip, scan, full disk, watch, rescore)."""
    step, spike, first, cs = names["step"], names["spike"], names["first"], names["cs"]
    add(
        Accident(
            "spike: no config here",
            [*spike, "--out", "s"],
            lambda r: (r / "forensics.yaml").rename(r / "elsewhere.yaml"),
        )
    )
    add(Accident("spike: read-only parent", [*spike, "--out", "ro/s"], chmod("ro", 0o555)))
    add(
        Accident(
            "spike: --rescore checkpoint missing", [*spike, "--checkpoint", "nope", "--out", "s"]
        )
    )
    add(
        Accident(
            "spike: seq_length 10000000",
            [*spike, "--out", "s"],
            edit_yaml(lambda c: c["data"].__setitem__("seq_length", 10_000_000)),
        )
    )
    add(Accident("spike: .idx damaged", [*spike, "--out", "s"], idx_poke(first, "pointer")))
    add(Accident("spike: a good run", [*spike, "--out", "s"], expect="ok", outputs=("s/**",)))
    add(
        Accident(
            "spike: --force over the old run",
            [*spike, "--out", "spike", "--force"],
            expect="ok",
            outputs=("spike/**",),
        )
    )
    add(Accident("check-skip: the run's own skip file", cs, expect="ok"))
    add(Accident("check-skip: skip file missing", ["check-skip", "nope.json"]))
    add(Accident("check-skip: not JSON", cs, write("spike/skip.json", "{oops")))
    add(Accident("check-skip: a JSON list", cs, write("spike/skip.json", "[]")))
    add(Accident("check-skip: binary", cs, write("spike/skip.json", bytes(range(256)))))
    add(Accident("check-skip: version 1", cs, edit_skip(lambda d: d.__setitem__("version", 1))))
    add(
        Accident(
            "check-skip: iterations as strings",
            cs,
            edit_skip(lambda d: d.__setitem__("iterations", [["1", "2"]])),
        )
    )
    add(
        Accident(
            "check-skip: a range to 10^12",
            cs,
            edit_skip(lambda d: d.__setitem__("iterations", [[step, 10**12]])),
        )
    )
    add(
        Accident(
            "check-skip: a range reversed",
            cs,
            edit_skip(lambda d: d.__setitem__("iterations", [[step, step - 5]])),
        )
    )
    add(
        Accident(
            "check-skip: a range before the rollback",
            cs,
            edit_skip(lambda d: d.__setitem__("iterations", [[1, 2]])),
        )
    )
    add(Accident("check-skip: rollback removed", cs, edit_skip(lambda d: delitem(d, "rollback"))))


def _group_13(add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]) -> None:
    """Accidents, part 13 (the battery in order: triage, replay, manifest, score, spike,
    check-skip, scan, full disk, watch, rescore)."""
    cs = names["cs"]
    add(
        Accident(
            "check-skip: rollback.iteration a string",
            cs,
            edit_skip(lambda d: setitem(d, "rollback.iteration", "100")),
        )
    )
    add(
        Accident(
            "check-skip: rollback.iteration moved",
            cs,
            edit_skip(lambda d: setitem(d, "rollback.iteration", d["rollback"]["iteration"] - 1)),
        )
    )
    add(
        Accident(
            "check-skip: flags not an object", cs, edit_skip(lambda d: d.__setitem__("flags", []))
        )
    )
    add(
        Accident(
            "check-skip: a flag edited",
            cs,
            edit_skip(lambda d: setitem(d, "flags.megatron-lm.flag", "--iterations-to-skip 1 2 3")),
        )
    )
    add(
        Accident(
            "check-skip: a flag of the wrong type",
            cs,
            edit_skip(lambda d: setitem(d, "flags.megatron-lm.flag", 5)),
        )
    )
    add(
        Accident(
            "check-skip: samples edited",
            cs,
            edit_skip(lambda d: d.__setitem__("samples", [[0, 1]])),
        )
    )
    add(
        Accident(
            "check-skip: fingerprint emptied",
            cs,
            edit_skip(lambda d: d.__setitem__("fingerprint", {})),
        )
    )
    add(
        Accident(
            "check-skip: fingerprint a string",
            cs,
            edit_skip(lambda d: d.__setitem__("fingerprint", "x")),
        )
    )
    add(
        Accident(
            "check-skip: trainer unknown", cs, edit_skip(lambda d: d.__setitem__("trainer", "nemo"))
        )
    )
    add(Accident("check-skip: --trainer nemo", [*cs, "--trainer", "nemo"]))


def _group_14(add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]) -> None:
    """Accidents, part 14 (the battery in order: triage, replay, manifest, score, spike,
    check-skip, scan, full disk, watch, rescore)."""
    end, first, cs, sc = names["end"], names["first"], names["cs"], names["sc"]
    add(
        Accident(
            "check-skip: weights changed",
            cs,
            edit_yaml(
                lambda c: stage0(c)["blend"][0].__setitem__(
                    "weight", stage0(c)["blend"][0].get("weight", 1.0) * 1.5
                )
            ),
            needle="made for another run",
        )
    )
    add(
        Accident(
            "check-skip: seed changed",
            cs,
            edit_yaml(lambda c: c["data"].__setitem__("seed", 999)),
            needle="made for another run",
        )
    )
    add(Accident("check-skip: a data file changed", cs, idx_poke(first, "pointer")))
    add(
        Accident(
            "check-skip: checkpoint list changed (rollback kept)",
            cs,
            edit_yaml(
                lambda c: c.__setitem__(
                    "checkpoints", info["checkpoints"][-3:] + [info["rollback"]]
                )
            ),
            expect="ok",
            check=says("checkpoint list changed"),
        )
    )
    add(
        Accident(
            "check-skip: rollback checkpoint gone",
            cs,
            both(
                edit_yaml(
                    lambda c: (c.pop("checkpoint_dir", None), c.__setitem__("checkpoints", [1]))
                )
            ),
            needle="no longer available",
        )
    )
    add(
        Accident(
            "check-skip: tracker edited", cs, write("spike/iterations_to_skip.tracker", "1\n2\n")
        )
    )
    add(
        Accident(
            "check-skip: skip past the end",
            cs,
            edit_skip(lambda d: d.__setitem__("iterations", [[end, end + 5]])),
        )
    )
    add(Accident("scan: --from 0", ["scan", "--from", "0", "--to", "5", "--out", "sc"]))
    add(
        Accident(
            "scan: --to past the end", ["scan", "--from", "1", "--to", str(end + 1), "--out", "sc"]
        )
    )
    add(Accident("scan: --from after --to", ["scan", "--from", "9", "--to", "5", "--out", "sc"]))
    add(Accident("scan: --out a file", [*sc[:5], "--out", "forensics.yaml"]))


def _group_15(add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]) -> None:
    """Accidents, part 15 (the battery in order: triage, replay, manifest, score, spike,
    check-skip, scan, full disk, watch, rescore)."""
    spike, replay, log, first, mk, man, sc, wa = (
        names["spike"],
        names["replay"],
        names["log"],
        names["first"],
        names["mk"],
        names["man"],
        names["sc"],
        names["wa"],
    )
    add(Accident("scan: --out foreign files", [*sc[:5], "--out", "data"]))
    add(Accident("scan: --engine bogus", [*sc, "--engine", "bogus"]))
    add(Accident("scan: --workers 0", [*sc, "--workers", "0"]))
    add(Accident("scan: --shard-iterations 0", [*sc, "--shard-iterations", "0"]))
    add(Accident("scan: --threshold -1", [*sc, "--threshold", "-1"]))
    add(Accident("scan: .idx damaged", sc, idx_poke(first, "length")))
    # ---- a full disk (files cannot grow past a limit)
    # 20 kB stops every run; 150 kB stops the demo's report (a small run's may fit: then the
    # right answer is the complete output)
    for limit, expect in ((20_000, "refuse"), (150_000, "any")):
        add(
            Accident(
                f"spike: disk full at {limit} B",
                [*spike, "--out", "s"],
                file_limit=limit,
                expect=expect,
                outputs=("s/**",),
            )
        )
        add(
            Accident(
                f"spike --force: disk full at {limit} B",
                [*spike, "--out", "spike", "--force"],
                file_limit=limit,
                expect=expect,
                outputs=("spike/**",),
            )
        )
    add(Accident("triage: disk full", ["triage", log, "--out", "t"], file_limit=20_000))
    add(
        Accident(
            "triage --force: disk full",
            ["triage", log, "--out", "triage", "--force"],
            file_limit=20_000,
        )
    )
    add(Accident("replay: disk full", [*replay, "--text", "--out", "w.parquet"], file_limit=5_000))
    add(Accident("manifest: disk full", [*man, "--out", "m.parquet"], mk, file_limit=500))
    add(
        Accident(
            "score: disk full",
            ["score", "d.jsonl", "--out", "s.parquet"],
            write("d.jsonl", "".join(f'{{"text": "document {i} " }}\n' for i in range(3000))),
            file_limit=3_000,
        )
    )
    add(
        Accident(
            "watch: log missing",
            ["watch", "nope.log", "--max-polls", "1", "--out", "w"],
            expect="any",
            outputs=("w/**",),
        )
    )
    add(
        Accident(
            "watch: trainer_state.json",
            ["watch", "trainer_state.json", "--max-polls", "1", "--out", "w"],
            write("trainer_state.json", '{"log_history": []}'),
        )
    )
    add(
        Accident(
            "watch: --interval 0", [*wa[:2], "--interval", "0", "--max-polls", "1", "--out", "w"]
        )
    )
    add(
        Accident(
            "watch: --interval -1", [*wa[:2], "--interval", "-1", "--max-polls", "1", "--out", "w"]
        )
    )
    add(Accident("watch: --format bogus", [*wa, "--format", "bogus"]))
    add(Accident("watch: --out is the log", [*wa[:-2], "--out", log]))
    add(Accident("watch: --prometheus is the log", [*wa, "--prometheus", log]))


def _group_16(add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]) -> None:
    """Accidents, part 16 (the battery in order: triage, replay, manifest, score, spike,
    check-skip, scan, full disk, watch, rescore)."""
    log, wa, rs = names["log"], names["wa"], names["rs"]
    add(
        Accident(
            "watch: --prometheus in a missing dir",
            [*wa, "--prometheus", "no/dir/p.prom"],
            expect="any",
            outputs=("w/**", "no/**"),
        )
    )
    add(Accident("watch: --webhook not a URL", [*wa, "--webhook", "not a url"]))
    add(Accident("watch: --on-malignant bogus", [*wa, "--on-malignant", "bogus"]))
    add(Accident("watch: --checkpoints a,b", [*wa, "--checkpoints", "a,b"]))
    add(
        Accident(
            "watch: binary log",
            wa,
            write(log, bytes(range(256)) * 10),
            expect="any",
            outputs=("w/**",),
        )
    )
    add(Accident("watch: one poll of the real log", wa, expect="ok", outputs=("w/**",)))
    add(Accident("rescore: checkpoint missing", [*rs, "--checkpoint", "nope"]))
    add(Accident("rescore: neither checkpoint nor losses", rs))
    add(
        Accident(
            "rescore: losses not parquet", [*rs, "--losses", "l.parquet"], write("l.parquet", "x")
        )
    )
    add(Accident("rescore: --dtype bogus", [*rs, "--checkpoint", "nope", "--dtype", "int3"]))
    add(Accident("rescore: --batch-size 0", [*rs, "--checkpoint", "nope", "--batch-size", "0"]))
    add(Accident("rescore: --export-tokens onto the data", [*rs, "--export-tokens", "data"]))


GROUPS = [
    _group_01,
    _group_02,
    _group_03,
    _group_04,
    _group_05,
    _group_06,
    _group_07,
    _group_08,
    _group_09,
    _group_10,
    _group_11,
    _group_12,
    _group_13,
    _group_14,
    _group_15,
    _group_16,
]


def _manifest_column(run: Path, manifest: str, column: str) -> None:
    import polars as pl

    table = pl.read_parquet(run / manifest)
    table.with_columns(pl.lit("7").alias(column)).write_parquet(run / manifest)


def _manifest_rows(run: Path, manifest: str, rows: int) -> None:
    import polars as pl

    pl.read_parquet(run / manifest).head(rows).write_parquet(run / manifest)


def _short_shuffle(run: Path) -> None:
    """Megatron's cache for the first dataset, with shuffle_index.npy cut to half."""
    import numpy as np

    sys.path.insert(0, str(REPO))
    from dataloaders.config import load_config
    from forensics.replay import open_replayer

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


# -- running and judging --------------------------------------------------------------------


def snapshot(folder: Path) -> dict[str, str]:
    """relative path -> sha1 of every file (symlinks and unreadable files by their target)."""
    out = {}
    for path in folder.rglob("*"):
        try:
            if path.is_file():
                out[str(path.relative_to(folder))] = hashlib.sha1(path.read_bytes()).hexdigest()
        except OSError:
            continue
    return out


def _limits(file_limit: int | None) -> Callable[[], None]:
    """Bounded memory; with `file_limit`, writes past it fail with EFBIG as on a full disk
    (Python ignores SIGXFSZ, so the write raises instead of killing the process)."""

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
        if file_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))

    return apply


def run_one(acc: Accident, base: Path, work: Path, cache: Path) -> Verdict:
    slug = re.sub(r"[^a-z0-9]+", "-", acc.name.lower()).strip("-")[:60]
    run = work / slug
    shutil.copytree(base, run, symlinks=True)
    crashes = work / f"{slug}.tmp"
    crashes.mkdir()
    try:
        if acc.setup is not None:
            acc.setup(run)
        before = snapshot(run)
        env = dict(
            os.environ,
            HF_HUB_OFFLINE="1",
            COLUMNS="400",
            PYTHONPATH=str(REPO),
            FORENSICS_CACHE=str(cache),
            TMPDIR=str(crashes),
        )
        start = time.monotonic()
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "forensics.cli", *acc.argv],
                cwd=run,
                env=env,
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                preexec_fn=_limits(acc.file_limit),
            )
        except subprocess.TimeoutExpired:
            return Verdict(acc, None, TIMEOUT_S, {"hang": f"no answer in {TIMEOUT_S} s"})
        verdict = Verdict(acc, proc.returncode, time.monotonic() - start)
        judge(acc, run, proc, before, verdict)
        return verdict
    finally:
        for path in run.rglob("*"):  # read-only folders made by the accident
            if path.is_dir():
                os.chmod(path, 0o755)
        shutil.rmtree(run, ignore_errors=True)
        shutil.rmtree(crashes, ignore_errors=True)


def judge(
    acc: Accident,
    run: Path,
    proc: subprocess.CompletedProcess,
    before: dict[str, str],
    verdict: Verdict,
) -> None:
    """Fill verdict.problems; see the module docstring for the kinds."""
    p = verdict.problems
    err = proc.stderr.strip()
    lines = err.splitlines()
    if (
        proc.returncode == 3
        or "Traceback (most recent call last)" in err
        or (proc.returncode not in (0, 2))
    ):
        p["traceback"] = f"exit {proc.returncode}: {(lines or [''])[-1][:200]}"
        return
    if proc.returncode == 2:
        if len(lines) != 1 or not lines[0].startswith("error: "):
            p["not one line"] = f"{len(lines)} lines: {err[:200]!r}"
        if acc.expect == "ok":
            p["refused wrongly"] = (lines or [""])[0][:200]
        if acc.needle and acc.needle not in " ".join(err.split()):
            p["unclear"] = f"does not say {acc.needle!r}: {(lines or [''])[0][:200]}"
    if proc.returncode == 0:
        if acc.expect == "refuse":
            p["silent wrong"] = f"exit 0: {(proc.stdout + err).strip()[-200:]!r}"
        elif acc.check is not None:
            problem = acc.check(run, proc)
            if problem:
                p["silent wrong"] = problem
    after = snapshot(run)
    may_write = acc.outputs if proc.returncode == 0 else ()

    def allowed(path: str) -> bool:
        # a spike output's .cache/ is its cache (replay, scores, the run marker): a rerun may
        # add to it or refresh it whatever its outcome
        return "/.cache/" in f"/{path}" or any(fnmatch.fnmatch(path, g) for g in may_write)

    changed = [k for k, v in before.items() if after.get(k) != v and not allowed(k)]
    new = [k for k in after if k not in before and not allowed(k)]
    if changed:
        p["half-written"] = f"changed or removed: {changed[:5]}"
    elif new:
        p["half-written"] = f"left new files: {new[:5]}"


def base_info(base: Path) -> dict[str, Any]:
    """Facts of the base run the battery needs (names, step, checkpoints)."""
    import polars as pl

    sys.path.insert(0, str(REPO))
    cfg = yaml.safe_load((base / "forensics.yaml").read_text())
    blend = stage0(cfg)["blend"]
    skip = json.loads((base / "spike" / "skip.json").read_text())
    first = blend[0]["prefix"]
    web = next((b["prefix"] for b in blend if "web" in b.get("name", "")), blend[-1]["prefix"])
    manifest = blend[0].get("manifest")
    ckpts = sorted(int(p.name[5:]) for p in (base / "checkpoints").glob("iter_*"))
    return {
        "step": skip["step"],
        "train_iters": cfg["training"]["train_iters"],
        "first_prefix": first,
        "web_prefix": web,
        "manifest": manifest,
        "first_docs": pl.read_parquet(base / manifest).height,
        "stages": "stages" in cfg["data"],
        "checkpoints": ckpts,
        "rollback": skip["rollback"]["iteration"],
    }


def prepare_base(source: Path | None, work: Path, cache: Path) -> Path:
    """A private copy of the run with a complete `spike/` output and `triage/` beside it."""
    base = work / "base"
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO), FORENSICS_CACHE=str(cache))
    if source is None:
        sys.path.insert(0, str(REPO))
        sys.path.insert(0, str(REPO / "tests"))
        from small_run import SMALL  # the tests' small run

        from forensics_testing.demo.build import build_run

        build_run(base, SMALL, progress=False)
    else:
        shutil.copytree(
            source, base, symlinks=True, ignore=shutil.ignore_patterns("spike-*", "*.watch")
        )
    cfg = yaml.safe_load((base / "forensics.yaml").read_text())
    log = base / cfg.get("log", "logs/train.log")
    events = base / "triage" / "events.json"
    if not events.exists():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "forensics.cli",
                "triage",
                str(log),
                "--out",
                str(base / "triage"),
                "--force",
            ],
            env=env,
            check=True,
            capture_output=True,
        )
    spikes = [e for e in json.loads(events.read_text()) if e.get("kind") == "spike"]
    spikes.sort(key=lambda e: e.get("verdict") != "malignant")  # malignant first
    step = spikes[0]["step"] if spikes else None
    truth = base / "truth.json"  # a generated run says where its spike is
    if truth.exists():
        step = json.loads(truth.read_text()).get("spike_iteration", step)
    if step is None:
        raise SystemExit(f"{source}: its triage finds no malignant spike to run spike on")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "forensics.cli",
            "spike",
            "--step",
            str(step),
            "--window",
            "20",
            "--embed-cap",
            "0",
            "--quiet",
            "--out",
            "spike",
        ],
        cwd=base,
        env=env,
        check=True,
    )
    return base


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--base",
        type=Path,
        default=None,
        help="a run directory (demo-run/); default: generate a small run",
    )
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default="*", help="glob over accident names")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="forensics-accidents-"))
    cache = work / "cache"
    t0 = time.monotonic()
    base = prepare_base(args.base.resolve() if args.base else None, work, cache)
    accidents = [a for a in battery(base_info(base)) if fnmatch.fnmatch(a.name, args.only)]
    print(
        f"{len(accidents)} accidents on copies of {args.base or 'a generated run'} "
        f"({args.jobs} at a time)",
        flush=True,
    )
    verdicts = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_one, a, base, work, cache) for a in accidents]
        for fut in concurrent.futures.as_completed(futures):
            v = fut.result()
            verdicts.append(v)
            for kind, text in v.problems.items():
                print(f"  {kind:<15} {v.accident.name}: {text}", flush=True)
    kinds = [
        "traceback",
        "hang",
        "silent wrong",
        "half-written",
        "not one line",
        "refused wrongly",
        "unclear",
    ]
    counts = {k: sum(k in v.problems for v in verdicts) for k in kinds}
    slowest = max(verdicts, key=lambda v: v.seconds)
    print(f"\nbad inputs tried: {len(verdicts)}")
    for k in kinds:
        print(f"{k + ':':<17}{counts[k]}")
    print(
        f"slowest: {slowest.accident.name} ({slowest.seconds:.1f} s); "
        f"battery {time.monotonic() - t0:.0f} s"
    )
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if any(counts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
