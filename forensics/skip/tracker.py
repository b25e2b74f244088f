"""A skip list Megatron-LM reads itself: its rerun state machine's rejected-results tracker file.

A thousand-iteration skip should not be a thousand-word command line. Megatron-LM's
`--result-rejected-tracker-filename FILE` makes arguments.py append
`RerunStateMachine.get_skipped_iterations_from_tracker_file(FILE)` to `--iterations-to-skip`
(NVIDIA/Megatron-LM d98e8a64dd, megatron/training/arguments.py:1717-1722). That function
(megatron/core/rerun_state_machine.py:1042-1108) matches lines
`ts=... node=... device=... jobID=J rank=R iteration=I status=S result=... message=...` and skips
iteration I when it was seen twice on the same rank with status RERUN_DISABLED or
*_RERUN_REPRODUCIBLE, unless more than one rank of one job reported it. So each value is written
twice, on rank 0 of one job. The values land in the same list as the flag's, so they carry the
version's semantics (logged iteration on megatron-core >= 0.17, logged iteration - 1 before).

The job appends its own records to that file as it trains: pass a copy, not the original.
"""

from __future__ import annotations

from collections.abc import Sequence

from forensics.errors import ForensicsError

TRACKER_FILE = "iterations_to_skip.tracker"
JOB = "forensics-skip"


def tracker_text(values: Sequence[int], when: str) -> str:
    """The tracker file for `values` (two identical records each, rank 0 of one job)."""
    lines = []
    for value in sorted(set(int(v) for v in values)):
        record = (
            f"ts={when} node=forensics device=0 jobID={JOB} rank=0 iteration={value} "
            "status=RerunValidationStatus.RERUN_DISABLED result=skip "
            "message='forensics spike: skip this iteration on restart'\n"
        )
        lines += [record, record]
    return "".join(lines)


def how_to_pass(path: str) -> str:
    """The flag that makes Megatron-LM read the file (a copy of it)."""
    return f"--result-rejected-tracker-filename {path}"


def read_tracker(text: str) -> list[int]:
    """The iterations Megatron-LM would take from a tracker file: a transcription of
    RerunStateMachine.get_skipped_iterations_from_tracker_file (rerun_state_machine.py:1057-1095),
    so check-skip can read the file without megatron-core (the tests hold it to the original)."""
    import re

    regex = (
        r"ts=.+ node=.+ device=.+ jobID=(.+) rank=(.+) iteration=(.+) status=(.+) "
        r"result=.+ message=.+"
    )
    potential: set[int] = set()
    ignore: set[int] = set()
    seen: set[tuple[int, int]] = set()
    by_job: dict[str, dict[int, set[int]]] = {}
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        match = re.search(regex, line)
        if not match:
            continue
        try:
            job, rank, iteration = str(match[1]), int(match[2]), int(match[3])
        except ValueError:
            # Megatron-LM would log an error and drop every line from here on.
            raise ForensicsError(
                f"tracker line {number}: rank or iteration is not a number"
            ) from None
        status = str(match[4]).split(".")[-1].upper()
        if status in ("RERUN_DISABLED", "FIRST_RERUN_REPRODUCIBLE", "SECOND_RERUN_REPRODUCIBLE"):
            if (rank, iteration) in seen:
                potential.add(iteration)
            seen.add((rank, iteration))
            ranks = by_job.setdefault(job, {}).setdefault(iteration, set())
            ranks.add(rank)
            if len(ranks) > 1:
                ignore.add(iteration)
    return sorted(potential - ignore)
