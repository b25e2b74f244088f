"""The accident battery's bad inputs for `replay --text`, `manifest`, `score` and `spike`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from forensics_testing.accidents.case import (
    Accident,
    both,
    edit_yaml,
    idx_poke,
    manifest_column,
    manifest_rows,
    short_shuffle,
    write,
)


def replay_text(
    add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]
) -> None:
    """Accidents of replay, replay --text."""
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
            lambda r: manifest_column(r, info["manifest"], "dataset"),
        )
    )
    add(
        Accident(
            "replay: manifest with an 'iteration' column",
            [*replay, "--out", "w.parquet"],
            lambda r: manifest_column(r, info["manifest"], "iteration"),
        )
    )
    add(
        Accident(
            "replay: manifest with a 'text' column",
            [*replay, "--text", "--out", "w.parquet"],
            lambda r: manifest_column(r, info["manifest"], "text"),
        )
    )
    add(
        Accident(
            "replay: manifest short",
            [*replay, "--out", "w.parquet"],
            lambda r: manifest_rows(r, info["manifest"], 5),
        )
    )
    add(
        Accident(
            "replay: manifest not parquet",
            [*replay, "--out", "w.parquet"],
            write(info["manifest"], "not parquet"),
        )
    )


def replay_text_and_manifest(
    add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]
) -> None:
    """Accidents of replay --text, manifest."""
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
            lambda r: short_shuffle(r),
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


def manifest(add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]) -> None:
    """Accidents of manifest."""
    first, jsonl, mk, man = names["first"], names["jsonl"], names["mk"], names["man"]
    add(
        Accident(
            "manifest: --prefix of the run with a JSONL that is not its text (lines of 2 "
            "characters for documents of hundreds of tokens)",
            [*man, "--prefix", first],
            mk,
            needle="characters per token",
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


def manifest_and_score(
    add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]
) -> None:
    """Accidents of manifest, score."""
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


def score_and_spike(
    add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]
) -> None:
    """Accidents of score, spike."""
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
