"""The pool's watch on whether its engine dropped its streams (sandbox/engine_watch.py), against
a stand-in dockerd whose /events stream the test ends; a real dockerd restarted under a run is
tests/faults/test_engine_restart.py."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sandbox.engine_watch import DROP_GRACE_S, STALL_S, EngineWatch

HEADERS = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n")


class StandIn:
    """Answers each /events request with a stream it holds open until ``drop``, and each ping
    at once unless ``hold_pings`` (then never: a stopped dockerd's socket accepts and says
    nothing)."""

    def __init__(self, path: Path) -> None:
        self.host = f"unix://{path}"
        self.opened = 0
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(path))
        self._server.listen(8)
        self._open: list[socket.socket] = []
        self.hold_pings = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            request = conn.recv(4096)
            if b"/events" in request:
                conn.sendall(HEADERS)
                self._open.append(conn)
                self.opened += 1
            elif b"/_ping" in request and self.hold_pings:
                self._open.append(conn)  # read, never answered
            elif b"/_ping" in request:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                             b"Content-Length: 2\r\nConnection: close\r\n\r\nOK")
                conn.close()
            else:
                conn.close()

    def drop(self) -> None:
        for conn in self._open:
            conn.close()
        self._open.clear()

    def close(self) -> None:
        self.drop()
        self._server.close()


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[StandIn]:
    server = StandIn(tmp_path / "docker.sock")
    yield server
    server.close()


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_an_end_of_the_engines_stream_is_seen_and_the_stream_opened_again(
        stand_in: StandIn) -> None:
    watch = EngineWatch(stand_in.host, None, "label")
    watch.start()
    try:
        _until(lambda: watch.connected, "the stream opened")
        mark = watch.mark()
        assert mark == 0
        stand_in.drop()
        assert asyncio.run(watch.dropped_since(mark))
        _until(lambda: stand_in.opened == 2 and watch.connected, "the stream opened again")
        assert watch.mark() == 1  # a run that starts now counts from the new stream
        assert watch.drops == 1
    finally:
        watch.close()


def test_nothing_is_told_while_the_stream_holds_or_was_never_open(
        stand_in: StandIn, tmp_path: Path) -> None:
    watch = EngineWatch(stand_in.host, None, "label")
    watch.start()
    try:
        _until(lambda: watch.connected, "the stream opened")
        started = time.monotonic()
        assert not asyncio.run(watch.dropped_since(watch.mark()))  # a run's own death
        assert time.monotonic() - started >= DROP_GRACE_S  # waited for an end to come
    finally:
        watch.close()
    nowhere = EngineWatch(f"unix://{tmp_path / 'none.sock'}", None, "label")
    nowhere.start()
    try:
        assert nowhere.mark() is None  # not open: an end would go unseen
        assert not asyncio.run(nowhere.dropped_since(None))
    finally:
        nowhere.close()


def test_closing_the_watch_is_not_a_drop(stand_in: StandIn) -> None:
    watch = EngineWatch(stand_in.host, None, "label")
    watch.start()
    _until(lambda: watch.connected, "the stream opened")
    watch.close()
    assert watch._thread is not None
    watch._thread.join(10)
    assert not watch._thread.is_alive()
    assert watch.drops == 0


def test_an_engine_that_answers_no_ping_for_long_stalled_and_is_told_after(
        stand_in: StandIn, tmp_path: Path) -> None:
    watch = EngineWatch(stand_in.host, None, "label")
    watch.start()
    try:
        _until(lambda: watch._answered is not None, "a ping answered")
        before = time.monotonic()
        assert not watch.stalled_since(before)  # answering: nothing stalled
        stand_in.hold_pings = True
        _until(lambda: watch.stalled_since(before), "the stall seen while it lasts")
        assert time.monotonic() - before > STALL_S
        stand_in.hold_pings = False
        _until(lambda: time.monotonic() - watch._answered < 1.5, "answered again")  # type: ignore[operator]
        resumed = time.monotonic()
        assert watch.stalled_since(before)  # a run sent before the stall: told after it
        assert not watch.stalled_since(resumed)  # one sent after it: not
    finally:
        watch.close()
    nowhere = EngineWatch(f"unix://{tmp_path / 'none.sock'}", None, "label")
    nowhere.start()
    try:
        time.sleep(STALL_S + 1.5)
        assert not nowhere.stalled_since(0.0)  # never answered: nothing can be told
    finally:
        nowhere.close()
