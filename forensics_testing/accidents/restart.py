"""The accident battery's bad inputs for `spike`, `check-skip`, `scan`, a full disk, `watch`
and `rescore`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from forensics_testing.accidents.case import (
    Accident,
    both,
    chmod,
    delitem,
    edit_skip,
    edit_yaml,
    idx_poke,
    says,
    setitem,
    stage0,
    write,
)


def spike_and_check_skip(
    add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]
) -> None:
    """Accidents of spike, check-skip."""
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


def check_skip(
    add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]
) -> None:
    """Accidents of check-skip."""
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


def check_skip_and_scan(
    add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]
) -> None:
    """Accidents of check-skip, scan."""
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


def full_disk_and_watch(
    add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]
) -> None:
    """Accidents of scan's options, a full disk for every writer, and watch's options."""
    scan_options(add, names)
    full_disk(add, names)
    watch_options(add, names)


def scan_options(add: Callable[[Accident], None], names: dict[str, Any]) -> None:
    """Scan given options out of range, a foreign output folder or a damaged index."""
    sc, first = names["sc"], names["first"]
    add(Accident("scan: --out foreign files", [*sc[:5], "--out", "data"]))
    add(Accident("scan: --engine bogus", [*sc, "--engine", "bogus"]))
    add(Accident("scan: --workers 0", [*sc, "--workers", "0"]))
    add(Accident("scan: --shard-iterations 0", [*sc, "--shard-iterations", "0"]))
    add(Accident("scan: --threshold -1", [*sc, "--threshold", "-1"]))
    add(Accident("scan: .idx damaged", sc, idx_poke(first, "length")))


def full_disk(add: Callable[[Accident], None], names: dict[str, Any]) -> None:
    """Every writer on a disk that fills up (files cannot grow past a limit)."""
    spike, replay, log, mk, man = (
        names["spike"],
        names["replay"],
        names["log"],
        names["mk"],
        names["man"],
    )
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


def watch_options(add: Callable[[Accident], None], names: dict[str, Any]) -> None:
    """Watch given a missing log, a file it cannot follow, or options out of range."""
    log, wa = names["log"], names["wa"]
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


def watch_and_rescore(
    add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]
) -> None:
    """Accidents of watch, rescore."""
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
