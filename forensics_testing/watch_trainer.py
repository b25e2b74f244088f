"""A fake trainer for the `forensics watch` tests: writes Megatron log lines in real time.

`python forensics_testing/watch_trainer.py SCENARIO LOG [PACE]` appends the scenario's lines to LOG
a few at a time (PACE seconds between bursts), flushing each burst, sometimes leaving a line half-
written for a while (the watcher must wait for its newline), and, for the rotation scenario,
renaming the log away mid-run and continuing in a new file, as logrotate does. `scenario(name)` is
also what the tests use to know what was written.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import polars as pl

from forensics_testing import loss_curves

FIRST = 2500  # the curves start late in a run: a settled level, 500 rows of history
RECOVERY_WINDOW = 200  # the watcher's and the batch triage's --recovery-window in these tests
SCENARIOS = ("benign", "malignant", "nan", "restart", "rotation")


def _lines(shape: str, last: int) -> list[str]:
    df = loss_curves.make(shape, n=last).filter(pl.col("step") >= FIRST)
    return loss_curves.megatron_lines(df)


def scenario(name: str) -> list[str]:
    """The lines written, in order; `ROTATE` marks where the log is rotated."""
    if name == "benign":  # grad-norm precursor at 2997, spike at 3000 back within ~20 steps
        return _lines("benign_spike", 3200)
    if name == "malignant":  # +0.6 for good: malignant once 200 steps passed
        return _lines("malignant_step", 3350)
    if name == "nan":  # healthy, then Megatron prints `lm loss: nan` from 2801 on
        lines = _lines("healthy", 2820)
        out = []
        for ln in lines:
            step = int(ln.split("iteration")[1].split("/")[0])
            if step > 2800:
                head, rest = ln.split("lm loss:", 1)
                ln = head + "lm loss: nan |" + rest.split("|", 1)[1]
            out.append(ln)
        return out
    if name == "restart":  # crash after 3100, the job restarts from 2900 and repeats iterations
        lines = _lines("benign_spike", 3200)
        cut = next(i for i, ln in enumerate(lines) if " 3100/" in ln)
        again = next(i for i, ln in enumerate(lines) if " 2901/" in ln)
        return lines[: cut + 1] + ["[restart] resuming from iteration 2900"] + lines[again:]
    if name == "rotation":
        lines = _lines("benign_spike", 3200)
        at = next(i for i, ln in enumerate(lines) if " 2990/" in ln)
        return lines[:at] + ["ROTATE"] + lines[at:]
    raise ValueError(name)


def write(name: str, log: Path, pace: float = 0.004, burst: int = 4) -> None:
    fh = open(log, "a", encoding="utf-8")  # noqa: SIM115
    for i, ln in enumerate(scenario(name)):
        if ln == "ROTATE":
            fh.close()
            os.replace(log, log.with_name(log.name + ".1"))
            fh = open(log, "a", encoding="utf-8")  # noqa: SIM115
            continue
        if i % 97 == 5:  # half a line now, the rest after the watcher may have polled
            fh.write(ln[:40])
            fh.flush()
            time.sleep(pace * 3)
            fh.write(ln[40:] + "\n")
        else:
            fh.write(ln + "\n")
        if i % burst == 0:
            fh.flush()
            time.sleep(pace)
    fh.close()


if __name__ == "__main__":
    write(sys.argv[1], Path(sys.argv[2]), *(float(a) for a in sys.argv[3:4]))
