"""Peak resident memory of a benchmark's process tree, sampled from /proc (scripts/bench_spike.py).

`PeakMemory` samples every process under this one: each one's VmHWM, and the tree's total
VmRSS and RssAnon at each sample (the whole tree's peak, workers included). `watch_stages`
names the spike stage running, so each stage gets its own peak.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from forensics.pipeline.clock import StageClock


class PeakMemory:
    """Peak resident memory (VmHWM, kB) of this process and of every process under it, sampled
    from /proc every `every` seconds while running (a worker's peak is kept after it exits)."""

    def __init__(self, every: float = 0.5) -> None:
        self.every = every
        self.peaks: dict[int, tuple[int, str]] = {}
        self.tree_kb = 0  # the largest resident total of the whole tree at one sample
        self.anon_kb = 0  # the same, private memory only (RssAnon: no mapped .bin pages)
        self.stage = "open"  # the spike stage running (set by watch_stages)
        self.by_stage: dict[str, int] = {}  # stage -> the largest tree total seen in it, kB
        self.anon_by_stage: dict[str, int] = {}  # stage -> the largest private tree total, kB
        self.driver_anon_by_stage: dict[str, int] = {}  # stage -> this process's largest RssAnon
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakMemory:
        try:  # start this process's peak afresh (not the run build's): Linux clear_refs
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            pass
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self._sample()

    def _sample(self) -> None:
        parent: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                    parent[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
        me = os.getpid()
        tree = anon = 0
        for pid in parent:
            up, hops = pid, 0
            while up not in (me, 0, 1) and hops < 32:
                up, hops = parent.get(up, 0), hops + 1
            if up != me:
                continue
            try:
                status = Path(f"/proc/{pid}/status").read_text()
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            hwm = next((int(x.split()[1]) for x in status.splitlines() if x.startswith("VmHWM")), 0)
            fields = {x.split(":")[0]: x.split()[1:2] for x in status.splitlines()}
            tree += int((fields.get("VmRSS") or ["0"])[0])
            anon += int((fields.get("RssAnon") or ["0"])[0])
            if pid == me:
                mine = int((fields.get("RssAnon") or ["0"])[0])
                self.driver_anon_by_stage[self.stage] = max(
                    self.driver_anon_by_stage.get(self.stage, 0), mine
                )
            # An exiting process reads an empty cmdline: keep the last name it ran under (the
            # pool's workers all exit together at the end of the stage, and were lost as
            # unnamed; a child just forked reads its parent's name until it execs).
            seen, named = self.peaks.get(pid, (0, ""))
            self.peaks[pid] = (max(hwm, seen), cmd[:200] or named)
        self.tree_kb = max(self.tree_kb, tree)
        self.by_stage[self.stage] = max(self.by_stage.get(self.stage, 0), tree)
        self.anon_kb = max(self.anon_kb, anon)
        self.anon_by_stage[self.stage] = max(self.anon_by_stage.get(self.stage, 0), anon)

    def summary(self) -> dict[str, float]:
        """GiB: the driver, the largest worker, and all workers together (peaks added: an
        upper bound on what they held at once); and the largest child process that has exited
        (the kernel's count: it misses no worker the sampler could not see)."""
        workers = [kb for pid, (kb, cmd) in self.peaks.items()
                   if pid != os.getpid() and is_worker(cmd)]  # fmt: skip
        import resource

        children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # kB, Linux
        return {
            "children_max": children / 2**20,
            "driver": self.peaks.get(os.getpid(), (0, ""))[0] / 2**20,
            "worker_max": max(workers, default=0) / 2**20,
            "workers_sum": sum(workers) / 2**20,
            "workers": len(workers),
            "tree": self.tree_kb / 2**20,
            "tree_anon": self.anon_kb / 2**20,
        }


@contextmanager
def watch_stages(memory: PeakMemory) -> Iterator[None]:
    """Name the running spike stage in `memory` (its per-stage peaks): StageClock.stage wrapped
    while the block runs."""
    original = StageClock.stage

    @contextmanager
    def stage(self: StageClock, name: str, what: str, **kwargs: object) -> Iterator[None]:
        memory.stage = name
        memory._sample()
        with original(self, name, what, **kwargs):
            yield
        memory._sample()

    StageClock.stage = stage  # type: ignore[method-assign]
    try:
        yield
    finally:
        StageClock.stage = original  # type: ignore[method-assign]


def is_worker(cmd: str) -> bool:
    """A decode/score worker: Ray's task workers, or the local engine's spawned pool."""
    return cmd.startswith("ray::") or "default_worker.py" in cmd or "multiprocessing.spawn" in cmd
