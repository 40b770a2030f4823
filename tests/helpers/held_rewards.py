"""A reward server on loopback that holds one ``/v1/rewards`` request unanswered, for the
tests of what waits on a slow or hung server: it answers the others at once (every other
completion scores 1), and notes in ``events`` when it took the held one ("held") and when
it answered it ("answered"), beside the events the test notes itself."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class HeldRewards:
    """``url``: the server; its ``hold``-th reward request (from 1) is answered once
    ``release`` is set, or ``bound_s`` after it came (a server that is slow, not dead, so
    that code still waiting for it ends, and the test sees in what order)."""

    def __init__(self, hold: int = 1, bound_s: float = 60.0) -> None:
        self.events: list[str] = []
        self.release = threading.Event()
        self.held = threading.Event()
        self.answered = threading.Event()
        self._lock = threading.Lock()
        self._count = 0
        self._hold, self._bound_s = hold, bound_s
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def note(self, event: str) -> None:
        with self._lock:
            self.events.append(event)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        held = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._send({"status": "ok"})

            def do_POST(self) -> None:
                items = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["items"]
                with held._lock:
                    held._count += 1
                    hold = held._count == held._hold
                if hold:
                    held.note("held")
                    held.held.set()
                    held.release.wait(held._bound_s)
                    held.note("answered")
                try:
                    self._send({"rewards": [float(i % 2) for i in range(len(items))],
                                "results": [{"verifier": item["verifier"], "status": "ok"}
                                            for item in items]})
                except OSError:  # the client is gone
                    pass
                if hold:
                    held.answered.set()

            def _send(self, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                return None

        return Handler


@contextmanager
def held_rewards(hold: int = 1, bound_s: float = 60.0) -> Iterator[HeldRewards]:
    """A ``HeldRewards`` serving for the ``with``; the held request is released at its end."""
    server = HeldRewards(hold, bound_s)
    thread = threading.Thread(target=server._server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server._server.shutdown()
        server._server.server_close()
