"""Benchmark: `forensics watch` CPU per poll as a log grows to 100,000 steps.

A Megatron log grows at 10 lines/s (one iteration per line) and the watcher polls every 5 s, so
each poll sees 50 new lines; time is simulated (lines are appended between polls, no sleeping).
The claim: the watcher's CPU per poll stays flat as the log grows, because it reads only the new
bytes and re-judges a bounded window. The anchor, measured in the same run at the same points:
what a poll would cost if it re-read and re-triaged the whole log (`read_log` + `triage`, i.e.
`forensics triage` in a loop).

    python scripts/bench_watch.py [--steps 100000]

`--plan-latency` measures instead how long an engineer waits for the plan: from the moment the
spike's line is written to the log to the moment the watcher posts its provisional plan (the
culprit, the rollback, the step that decides it). The run is the demo's small generated run
(forensics_testing.demo TINY: real Megatron data with a dirty crawl batch from iteration 301, a
simulated log spiking at 330); a writer thread appends its lines at `--lines-per-s` while the
watcher polls every `--interval` seconds, as `forensics watch --config` does. The claim: the plan
arrives within one poll plus the analysis (`forensics spike`), long before the verdict.

    python scripts/bench_watch.py --plan-latency [--interval 5]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl
from rich.console import Console
from rich.table import Table

from forensics.triage.analyze import triage
from forensics.triage.config import TriageConfig
from forensics.triage.readers import read_log
from forensics.watch.loop import Watcher, WatchOptions
from forensics_testing import loss_curves
from forensics_testing.demo.build import TINY, build_run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--lines-per-poll", type=int, default=50, help="10 lines/s x 5 s interval")
    ap.add_argument("--plan-latency", action="store_true", help="time the spike line -> plan")
    ap.add_argument("--interval", type=float, default=5.0, help="watcher poll interval (s)")
    ap.add_argument("--lines-per-s", type=float, default=10.0, help="trainer log lines per s")
    args = ap.parse_args()
    console = Console()
    if args.plan_latency:
        plan_latency(console, args.interval, args.lines_per_s)
        return
    df = loss_curves.healthy(args.steps, seed=1)
    # a benign spike every 10,000 steps, so the detectors have work to do
    s = df["step"].to_numpy()
    bump = np.zeros(len(s))
    for at in range(5_000, args.steps, 10_000):
        bump += np.where(s >= at, 1.5 * np.exp(-np.clip(s - at, 0, None) / 5.0), 0.0)
    df = df.with_columns(pl.Series("loss", df["loss"].to_numpy() + bump))
    lines = loss_curves.megatron_lines(df)
    marks = sorted({m for m in (1_000, 10_000, 25_000, 50_000, 75_000, args.steps)})
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "train.log"
        log.write_text("")
        w = Watcher(WatchOptions(log=log, out=Path(tmp) / "w", interval=5.0))
        per_poll: list[float] = []
        read_per_poll: list[int] = []
        fh = open(log, "a")  # noqa: SIM115
        t_wall = time.perf_counter()
        n = 0
        with console.status("") as status:
            for i in range(0, len(lines), args.lines_per_poll):
                fh.write("\n".join(lines[i : i + args.lines_per_poll]) + "\n")
                fh.flush()
                before_bytes = w.follower.bytes_read if w.follower else 0
                t = time.process_time()
                w.poll()
                per_poll.append(time.process_time() - t)
                read_per_poll.append(w.follower.bytes_read - before_bytes)
                n = i + args.lines_per_poll
                if marks and n >= marks[0]:
                    mark = marks.pop(0)
                    status.update(f"step {mark:,}: timing the whole-log anchor")
                    t = time.process_time()
                    triage(read_log(log))
                    anchor = time.process_time() - t
                    recent = per_poll[-100:]
                    rows.append(
                        (
                            mark,
                            log.stat().st_size,
                            1e3 * float(np.median(recent)),
                            1e3 * float(np.percentile(recent, 95)),
                            int(np.median(read_per_poll[-100:])),
                            1e3 * anchor,
                        )
                    )
                status.update(f"step {n:,} / {len(lines):,}")
        fh.close()
        wall = time.perf_counter() - t_wall
        kinds: dict[str, int] = {}
        for m in w.book.messages:
            key = f"{m['kind']} {m.get('verdict') or m['message']}"
            kinds[key] = kinds.get(key, 0) + 1
        w.close()
    table = Table(title=f"forensics watch: CPU per poll ({args.lines_per_poll} new lines/poll)")
    for col in (
        "log at step",
        "log size",
        "watch CPU/poll median (ms)",
        "p95 (ms)",
        "bytes read/poll",
        "anchor: re-triage whole log (ms)",
    ):
        table.add_column(col, justify="right")
    for mark, size, med, p95, nbytes, anchor in rows:
        table.add_row(
            f"{mark:,}", f"{size / 1e6:.1f} MB", f"{med:.1f}", f"{p95:.1f}", f"{nbytes:,}",
            f"{anchor:.0f}",
        )  # fmt: skip
    console.print(table)
    console.print(
        f"{len(per_poll):,} polls in {wall:.1f} s wall; messages: "
        + ", ".join(f"{k} x{v}" for k, v in sorted(kinds.items()))
        + f" ({len(range(5_000, args.steps, 10_000))} benign spikes planted)"
    )


def plan_latency(console: Console, interval: float, lines_per_s: float) -> None:
    """Spike line written -> provisional plan posted, on the demo's small run (see the module
    docstring)."""
    import threading

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        with console.status("building the demo's small run"):
            build_run(run, TINY, progress=False)
        lines = (run / "logs" / "train.log").read_text().splitlines()
        spike_at = next(i for i, ln in enumerate(lines) if f" {TINY.spike_iteration:8d}/" in ln)
        log = Path(tmp) / "live.log"
        log.write_text("\n".join(lines[:spike_at]) + "\n")  # the run so far
        written: dict[str, float] = {}

        def trainer() -> None:
            time.sleep(interval * 0.5)  # the line lands mid-interval, as it would in a live run
            with open(log, "a") as fh:
                for i, ln in enumerate(lines[spike_at:]):
                    fh.write(ln + "\n")
                    fh.flush()
                    if i == 0:
                        written["spike"] = time.time()
                    time.sleep(1.0 / lines_per_s)

        w = Watcher(
            WatchOptions(
                log=log,
                out=Path(tmp) / "w",
                interval=interval,
                cfg=TriageConfig(),
                config=str(run / "forensics.yaml"),
                spike_args=("--embed-cap", "0"),
            )
        )
        w.poll()  # the history before the spike, read before the spike is written
        writer = threading.Thread(target=trainer, daemon=True)
        writer.start()
        deadline = time.time() + 600
        with console.status("waiting for the plan"):
            while time.time() < deadline and not w.book.has("plan"):
                start = time.monotonic()
                w.poll()
                left = interval - (time.monotonic() - start)
                if left > 0 and not w.book.has("plan"):
                    w.wait(left)  # as Watcher.run: early when the analysis ends
        writer.join()
        w.close()
        msgs = w.book.messages
    t0 = written["spike"]

    def at(message: str, kind: str | None = None) -> float | None:
        m = next((m for m in msgs if m["message"] == message and kind in (None, m["kind"])), None)
        return None if m is None else m["time"] - t0

    plan = next((m for m in msgs if m["message"] == "plan"), None)
    raised, started = at("raised", "spike"), at("forensics_started")
    done, posted = at("forensics"), at("plan")
    table = Table(title=f"forensics watch: spike line -> plan (poll every {interval:g} s)")
    table.add_column("moment")
    table.add_column("seconds after the spike's line", justify="right")
    for name, value in (
        ("spike raised (undecided), analysis started", raised),
        ("forensics spike started", started),
        ("analysis finished", done),
        ("provisional plan posted", posted),
    ):
        table.add_row(name, "-" if value is None else f"{value:.1f}")
    console.print(table)
    if plan is not None and started is not None and done is not None:
        analysis = done - started
        console.print(
            f"analysis (forensics spike, --embed-cap 0) {analysis:.1f} s; plan at {posted:.1f} s "
            f"<= one poll ({interval:g} s) + analysis = {interval + analysis:.1f} s: "
            f"{'yes' if posted <= interval + analysis + 0.5 else 'NO'}"
        )
        console.print(f"plan: {plan['summary']}")
    else:
        console.print("no plan was posted within 600 s")


if __name__ == "__main__":
    main()
