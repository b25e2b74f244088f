"""The accident battery: bad inputs a careless or unlucky user gives every command, each on a
fresh copy of a real run, and what the command did with them.

Each accident edits a copy of the run (a truncated .idx, a hand-edited skip.json, `seq_length:
10000000`, ...), runs one `forensics` command in it, and is judged by what a user needs
(`run.judge`):

- traceback     an internal error (exit 3), a Python traceback, or an unexpected exit status
- hang          no answer within the time limit (a command must answer in seconds)
- silent wrong  exit 0 where a refusal was due, or an answer its check finds wrong
- half-written  a failed command left new files behind (other than the record of what failed
                that the accident's `kept` names), or any command changed a file it was
                not asked to write (every pre-existing file is compared byte for byte; a
                spike output's `.cache/` is a cache and may change)
- not one line  a refusal that is not exactly one `error:` line
- refused wrongly  a refusal of an input that is fine
- unclear       a refusal that does not say what the accident's `needle` says it must

The accidents are defined by command in `triage_replay`, `inputs`, `restart` and `hangs`, and
the sets and files that look whole and are not in `integrity`; `case` holds the edits and checks
they are built from. tests/forensics/test_accident_battery.py runs each as a pytest case (its id
is the accident's name); scripts/accidents.py runs them all on any run directory and prints the
counts.
"""

from __future__ import annotations

from typing import Any

from forensics_testing.accidents import expected, hangs, inputs, integrity, restart, triage_replay
from forensics_testing.accidents.case import ROOT, Accident, Verdict
from forensics_testing.accidents.names import shared_names
from forensics_testing.accidents.run import KINDS, base_info, prepare_base, run_one

PARTS = (
    triage_replay.triage_1,
    triage_replay.triage_2,
    triage_replay.triage_and_replay,
    triage_replay.replay_1,
    triage_replay.replay_2,
    triage_replay.replay_3,
    inputs.replay_text,
    inputs.replay_text_and_manifest,
    inputs.manifest,
    inputs.manifest_and_score,
    inputs.score_and_spike,
    restart.spike_and_check_skip,
    restart.check_skip,
    restart.check_skip_and_scan,
    restart.full_disk_and_watch,
    restart.watch_and_rescore,
    hangs.hangs_and_order,
    integrity.publish_leftovers,
    integrity.manifests_and_tokenizers,
    integrity.other_families,
)


def battery(info: dict[str, Any]) -> list[Accident]:
    """Every accident, by command. `info`: facts of the base run (step, checkpoints, names)."""
    a: list[Accident] = []
    names = shared_names(info)
    for part in PARTS:
        part(a.append, info, names)
    if ROOT:
        a = [x for x in a if "read-only" not in x.name]
    return expected.apply(a)


__all__ = ["KINDS", "Accident", "Verdict", "base_info", "battery", "prepare_base", "run_one"]
