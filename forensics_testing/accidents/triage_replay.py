"""The accident battery's bad inputs for `triage` and `replay`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from forensics_testing.accidents.case import (
    Accident,
    chmod,
    edit_yaml,
    idx_poke,
    literal_names,
    not_healthy,
    says,
    stage0,
    swap,
    truncate,
    write,
)


def triage_1(add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]) -> None:
    """Accidents of triage."""
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


def triage_2(add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]) -> None:
    """Accidents of triage."""
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


def triage_and_replay(
    add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]
) -> None:
    """Accidents of triage, replay."""
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


def replay_1(add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]) -> None:
    """Accidents of replay."""
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


def replay_2(add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]) -> None:
    """Accidents of replay."""
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


def replay_3(add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]) -> None:
    """Accidents of replay."""
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
