"""A local webhook receiver for the watcher's tests: it records every JSON body it accepts and
fails the first POST (503), so the sender must retry."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Receiver(http.server.BaseHTTPRequestHandler):
    bodies: list[dict] = []
    fail_first = 1

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        n = int(self.headers["Content-Length"])
        body = json.loads(self.rfile.read(n))
        if Receiver.fail_first > 0:  # the first delivery fails: the sender must retry
            Receiver.fail_first -= 1
            self.send_response(503)
            self.end_headers()
            return
        Receiver.bodies.append(body)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def serve_webhook() -> Iterator[str]:
    """The receiver on a free local port (its URL), with no bodies yet."""
    Receiver.bodies, Receiver.fail_first = [], 1
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()
