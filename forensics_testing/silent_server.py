"""Servers on 127.0.0.1 that never answer, for the tests of what a command does with a remote
end that is down: one that accepts connections and never says a word (a hung webhook, a Ray
head behind a dead proxy), and a port where nothing listens (a closed port)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass
class Silent:
    """Where the silent server listens, and whether a client has connected yet (a test then
    knows the client is waiting for an answer)."""

    host: str
    port: int
    accepted: threading.Event

    def __iter__(self) -> Iterator[Any]:  # `host, port = server`
        return iter((self.host, self.port))


@contextmanager
def silent_server() -> Iterator[Silent]:
    """A listener that accepts every connection, reads nothing and answers nothing until the
    block ends; the connections are closed then."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.1)
    held: list[socket.socket] = []
    done, accepted = threading.Event(), threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            held.append(conn)
            accepted.set()

    thread = threading.Thread(target=accept, name="silent-server", daemon=True)
    thread.start()
    try:
        yield Silent("127.0.0.1", listener.getsockname()[1], accepted)
    finally:
        done.set()
        thread.join(2.0)
        for conn in held:
            conn.close()
        listener.close()


def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
