"""Where the shards run: a process pool on this machine, or Ray Data on a cluster.

Both engines run `shard.scan_shard` on each pending shard and call `on_done(summary)` as shards
finish (in completion order); the shards' Parquet parts are written by the workers themselves.
They return the shards that failed for good, so the caller can say exactly what is missing.

- local: a `spawn` process pool (no forked polars/tokenizers thread pools), at most two shards
  in flight per worker so memory stays flat; a worker that dies (killed, out of memory) breaks
  the pool, which is rebuilt and the unfinished shards resubmitted, up to RETRIES times.
- ray: `ray.data.from_items(shards).map(scan_shard)` with one CPU per task and a task pool of
  `workers`; Ray retries a task whose worker died (`max_retries`), and results stream back with
  `iter_rows` (a few numbers per shard, never text). Without an address a local Ray instance is
  started with workers + 1 CPUs: Ray Data needs a CPU beyond the map tasks' for its own
  operators, or the stream stalls.
"""

from __future__ import annotations

import logging
import os
import socket
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from forensics.errors import ForensicsError
from forensics.scan.shard import FAULT_ENV, ShardSummary, scan_shard

RETRIES = 3
ENGINES = ("local", "ray")


def _threads_env(workers: int) -> dict[str, str]:
    """Native thread pools per worker: the machine's cores shared out, at least one."""
    per = str(max(1, (os.cpu_count() or 1) // workers))
    return {
        "POLARS_MAX_THREADS": per,
        "RAYON_NUM_THREADS": per,
        "OMP_NUM_THREADS": per,
        "TOKENIZERS_PARALLELISM": "false",
    }


def run_local(
    config: Any,
    shards: Sequence[tuple[int, int]],
    parts: Path,
    workers: int,
    on_done: Callable[[ShardSummary], None],
) -> list[tuple[int, int]]:
    """Run the shards in a process pool; returns those that failed RETRIES times."""
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    pending = list(shards)
    failures: dict[tuple[int, int], int] = {}
    saved = {k: os.environ.get(k) for k in _threads_env(workers)}
    os.environ.update(_threads_env(workers))  # spawned children read them at start
    try:
        while pending:
            broken = False
            with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
                queue = list(pending)
                running: dict[Any, tuple[int, int]] = {}
                while queue or running:
                    while queue and len(running) < 2 * workers:
                        a, b = queue.pop(0)
                        running[pool.submit(scan_shard, config, a, b, str(parts))] = (a, b)
                    finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
                    for fut in finished:
                        shard = running.pop(fut)
                        try:
                            on_done(fut.result())
                            pending.remove(shard)
                        except BrokenProcessPool:
                            broken = True
                    if broken:
                        break
            if broken:
                for shard in pending:
                    failures[shard] = failures.get(shard, 0) + 1
                given_up = [s for s in pending if failures[s] >= RETRIES]
                if given_up:
                    return given_up
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return []


def check_ray_address(address: str) -> None:
    """A one-line error, fast, when nothing listens at a Ray address (host:port)."""
    target = address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise ForensicsError(f"--ray-address {address!r}: expected HOST:PORT (e.g. 10.0.0.1:6379)")
    try:
        with socket.create_connection((host, int(port)), timeout=5):
            pass
    except OSError as err:
        raise ForensicsError(
            f"--ray-address {address}: no Ray head reachable there ({err.strerror or err})"
        ) from None


def run_ray(
    config: Any,
    shards: Sequence[tuple[int, int]],
    parts: Path,
    workers: int,
    on_done: Callable[[ShardSummary], None],
    address: str | None = None,
) -> list[tuple[int, int]]:
    """Run the shards as a Ray Data map; returns the shards without a result."""
    if address:
        check_ray_address(address)
    try:
        import ray
        import ray.data
    except ImportError:
        raise ForensicsError(
            "--engine ray needs Ray Data: pip install 'forensics[ray]' (ray[data])"
        ) from None

    env = _threads_env(workers)
    if os.environ.get(FAULT_ENV):
        env[FAULT_ENV] = os.environ[FAULT_ENV]
    pythonpath = os.environ.get("PYTHONPATH")
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    started = not ray.is_initialized()
    if started:
        kwargs: dict[str, Any] = {
            "runtime_env": {"env_vars": env},
            "include_dashboard": False,
            "log_to_driver": False,
            "configure_logging": False,
        }
        if address:
            kwargs["address"] = address
        else:
            kwargs["num_cpus"] = workers + 1
            kwargs["_node_ip_address"] = "127.0.0.1"
        try:
            ray.init(**kwargs)
        except Exception as err:  # Ray raises ConnectionError, RuntimeError, ValueError ...
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ForensicsError(f"cannot start or reach Ray ({first})") from None
    try:
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        parts_s = str(parts)

        def _task(row: dict[str, Any]) -> dict[str, Any]:
            return scan_shard(config, int(row["first"]), int(row["last"]), parts_s).to_dict()

        items = [{"first": a, "last": b} for a, b in shards]
        with warnings.catch_warnings():
            # max_retries as a remote argument is deprecated (removal in Ray 2.64; we pin 2.60)
            # but is the only bound: Ray Data's own default retries a dying worker forever.
            warnings.simplefilter("ignore")
            ds = ray.data.from_items(items, override_num_blocks=len(items)).map(
                _task,
                compute=ray.data.TaskPoolStrategy(size=workers),
                num_cpus=1,
                max_retries=RETRIES,
            )
        seen: set[tuple[int, int]] = set()
        try:
            for row in ds.iter_rows():
                summary = ShardSummary(**{k: row[k] for k in ShardSummary.__dataclass_fields__})
                seen.add((summary.first, summary.last))
                on_done(summary)
        except ForensicsError:
            raise
        except Exception as err:  # a task that failed for good ends the stream
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            missing = [s for s in shards if s not in seen]
            if not missing:
                raise
            on_error = getattr(on_done, "note", None)
            if callable(on_error):
                on_error(f"Ray: {first}")
        return [s for s in shards if s not in seen]
    finally:
        if started:
            ray.shutdown()


def run_engine(
    engine: str,
    config: Any,
    shards: Sequence[tuple[int, int]],
    parts: Path,
    workers: int,
    on_done: Callable[[ShardSummary], None],
    ray_address: str | None = None,
) -> list[tuple[int, int]]:
    if engine == "local":
        return run_local(config, shards, parts, workers, on_done)
    if engine == "ray":
        return run_ray(config, shards, parts, workers, on_done, ray_address)
    raise ForensicsError(f"--engine {engine!r}: choose one of {', '.join(ENGINES)}")
