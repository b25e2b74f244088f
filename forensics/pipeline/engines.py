"""Where a stage's parts run: a process pool on this machine, or Ray Data on a cluster.

`map_parts(engine, task, items, ...)` calls `task(item)` for every item (a small dict: a part's
number and the paths it reads and writes) and `on_done(result)` as results come back, in
completion order. Tasks write their own outputs (Parquet parts), so only a few numbers per part
pass back. It returns the items that failed for good, so the caller says exactly what is missing.

- local: a `spawn` process pool (no forked polars/tokenizers thread pools), at most two items in
  flight per worker so memory stays flat; a worker that dies (killed, out of memory) breaks the
  pool, which is rebuilt and the unfinished items resubmitted, up to RETRIES times.
- ray: `ray.data.from_items(items).map(task)` with one CPU per task and a task pool of
  `workers`; Ray retries a task whose worker died (`max_retries`). Without an address a local
  Ray instance is started with workers + 1 CPUs (Ray Data needs a CPU beyond the map tasks' for
  its own operators, or the stream stalls).
"""

from __future__ import annotations

import logging
import os
import socket
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from forensics.errors import ForensicsError

RETRIES = 3
ENGINES = ("local", "ray")
Item = dict[str, Any]


@dataclass(frozen=True)
class Parts:
    """A stage's parts, as every engine takes them: `task(item)` for each of `items`, `workers`
    at a time, and `on_done(result)` as each result comes back (in completion order)."""

    task: Callable[[Item], Item]
    items: Sequence[Item]
    workers: int
    on_done: Callable[[Item], None]


def _unknown_engine(engine: str) -> ForensicsError:
    return ForensicsError(f"--engine {engine!r}: choose one of {', '.join(ENGINES)}")


def check_engine(engine: str, workers: int, address: str | None) -> None:
    """Bad engine options, before any work: a one-line error."""
    if engine not in ENGINES:
        raise _unknown_engine(engine)
    if workers < 1:
        raise ForensicsError(f"--workers {workers}: must be >= 1")
    if address and engine != "ray":
        raise ForensicsError("--ray-address needs --engine ray")
    if address:
        check_ray_address(address)


def threads_env(workers: int) -> dict[str, str]:
    """Native thread pools per worker: the machine's cores shared out, at least one."""
    per = str(max(1, (os.cpu_count() or 1) // workers))
    return {
        "POLARS_MAX_THREADS": per,
        "RAYON_NUM_THREADS": per,
        "OMP_NUM_THREADS": per,
        "TOKENIZERS_PARALLELISM": "false",
    }


# How long a Ray address may take to accept a connection, and then to answer it.
CONNECT_TIMEOUT_S = 5.0
# HTTP/2's client preface and an empty SETTINGS frame (RFC 9113 sections 3.4 and 6.5): a Ray
# head's GCS and Ray Client ports are gRPC servers, which answer with their own SETTINGS frame
# at once. A server that accepts and says nothing would leave `ray.init` retrying for minutes.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_H2_SETTINGS = 4


def check_ray_address(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """A one-line error, within `timeout_s` each for connecting and for the answer, when
    nothing listens at a Ray address (host:port), or what listens there does not answer as a
    gRPC server does (a hung head, a dead proxy, another service). Skipped for the answer when
    Ray's TLS is on (RAY_USE_TLS): the server then waits for a TLS handshake first."""
    target = address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise ForensicsError(f"--ray-address {address!r}: expected HOST:PORT (e.g. 10.0.0.1:6379)")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as conn:
            if os.environ.get("RAY_USE_TLS", "0").lower() in ("0", "", "false"):
                conn.settimeout(timeout_s)
                conn.sendall(_H2_PREFACE)
                reply = conn.recv(9)
                if len(reply) < 4 or reply[3] != _H2_SETTINGS:
                    raise ForensicsError(
                        f"--ray-address {address}: answers, but not as a Ray head (no gRPC "
                        "handshake); check the host and port (the head's GCS port, 6379 by "
                        "default)"
                    )
    except TimeoutError:
        raise ForensicsError(
            f"--ray-address {address}: no answer in {timeout_s:g} s (a hung Ray head, or "
            "another service that accepts and never answers); check that the head is up"
        ) from None
    except OSError as err:
        raise ForensicsError(
            f"--ray-address {address}: no Ray head reachable there ({err.strerror or err})"
        ) from None


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


@contextmanager
def ray_session(workers: int, address: str | None, env: dict[str, str]) -> Iterator[Any]:
    """`ray`, initialised (joined at `address`, or a local instance on 127.0.0.1) and shut down
    afterwards if this call started it."""
    try:
        import ray
        import ray.data
    except ImportError:
        raise ForensicsError(
            "--engine ray needs Ray Data: pip install 'forensics[ray]' (ray[data])"
        ) from None
    started = not ray.is_initialized()
    if started:
        kwargs: dict[str, Any] = {"runtime_env": {"env_vars": env}, "include_dashboard": False,
                                  "log_to_driver": False, "configure_logging": False}  # fmt: skip
        if address:
            kwargs["address"] = address
        else:
            kwargs["num_cpus"] = workers + 1
            kwargs["_node_ip_address"] = "127.0.0.1"
        try:
            ray.init(**kwargs)
        except Exception as err:  # Ray raises ConnectionError, RuntimeError, ValueError ...
            raise ForensicsError(f"cannot start or reach Ray ({_first_line(err)})") from None
    try:
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        yield ray
    finally:
        if started:
            ray.shutdown()


def map_ray(
    parts: Parts,
    address: str | None = None,
    env: dict[str, str] | None = None,
    on_error: Callable[[str], None] | None = None,
) -> list[Item]:
    """Run the parts as a Ray Data map; returns the items without a result.
    `env`: extra environment for the workers; `on_error` hears why Ray gave up on a task."""
    task, items, workers, on_done = parts.task, parts.items, parts.workers, parts.on_done
    env = {**threads_env(workers), **(env or {})}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    seen: set[int] = set()
    with ray_session(workers, address, env) as ray:
        with warnings.catch_warnings():
            # max_retries as a remote argument is deprecated (removal in Ray 2.64; we pin 2.60)
            # but is the only bound: Ray Data's own default retries a dying worker forever.
            warnings.simplefilter("ignore")
            ds = ray.data.from_items(list(items), override_num_blocks=len(items)).map(
                task,
                compute=ray.data.TaskPoolStrategy(size=workers),
                num_cpus=1,
                max_retries=RETRIES,
            )
        try:
            for row in ds.iter_rows():
                seen.add(int(row["part"]))
                on_done(dict(row))
        except ForensicsError:
            raise
        except Exception as err:  # a task that failed for good ends the stream
            if all(int(i["part"]) in seen for i in items):
                raise
            if on_error is not None:
                on_error(f"Ray: {_first_line(err)}")
    return [i for i in items if int(i["part"]) not in seen]


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """`values` set in this process's environment (spawned children read it at start), the old
    values restored afterwards."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def map_local(parts: Parts) -> list[Item]:
    """Run the parts in a spawn process pool; returns the items that failed RETRIES times
    (their worker died each time)."""
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    task, workers, on_done = parts.task, parts.workers, parts.on_done
    pending = {int(i["part"]): i for i in parts.items}
    failures: dict[int, int] = {}
    with _environment(threads_env(workers)):
        while pending:
            broken = False
            with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
                queue = list(pending.values())
                running: dict[Any, int] = {}
                while queue or running:
                    while queue and len(running) < 2 * workers:
                        item = queue.pop(0)
                        running[pool.submit(task, item)] = int(item["part"])
                    finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
                    for fut in finished:
                        part = running.pop(fut)
                        try:
                            on_done(fut.result())
                            pending.pop(part)
                        except BrokenProcessPool:
                            broken = True
                    if broken:
                        break
            for part in pending if broken else ():
                failures[part] = failures.get(part, 0) + 1
            given_up = [pending[p] for p in pending if failures.get(p, 0) >= RETRIES]
            if given_up:
                return given_up
    return []


def map_parts(
    engine: str,
    task: Callable[[Item], Item],
    items: Sequence[Item],
    workers: int,
    on_done: Callable[[Item], None],
    address: str | None = None,
    env: dict[str, str] | None = None,
    on_error: Callable[[str], None] | None = None,
) -> list[Item]:
    """`task` over `items` on the chosen engine (see the module doc); the failed items.
    (Local workers inherit this process's environment; `env` and `on_error` serve Ray.)"""
    parts = Parts(task, items, workers, on_done)
    if engine == "local":
        return map_local(parts)
    if engine == "ray":
        return map_ray(parts, address, env, on_error)
    raise _unknown_engine(engine)
