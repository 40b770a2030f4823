"""The paced listener and protocol (reward_server/listener.py) under uvicorn on a real loop:
how many connections are accepted and how many requests parsed per turn of the loop, that a
health probe goes ahead of a burst already waiting, and that what waits (bodies, kept-alive
connections) reaches the app intact. Read from event order (turns), not the clock."""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import uvicorn

from reward_server import http_protocol, listener
from reward_server.http_protocol import PacedHttpToolsProtocol
from reward_server.listener import PacedLoop


class Recorder:
    """A stand-in app and protocol that note the loop turn each event happened in."""

    def __init__(self) -> None:
        self.turn = 0
        self.started: list[tuple[int, str]] = []  # (turn, path) at each request's start
        self.made: list[int] = []  # the turn of each connection's start

    def protocol(self) -> type[PacedHttpToolsProtocol]:
        recorder = self

        class Noted(PacedHttpToolsProtocol):
            def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
                recorder.made.append(recorder.turn)
                super().connection_made(transport)

        return Noted

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.started.append((self.turn, scope["path"]))
        if scope["path"] == "/slow":  # an answer that takes longer than a head may
            await asyncio.sleep(4 * http_protocol.HEAD_TIMEOUT_S)
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        answer = (b"x" * (8 << 20) if scope["path"] == "/big"
                  else hashlib.sha256(body).hexdigest().encode())
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(answer)).encode())]})
        await send({"type": "http.response.body", "body": answer})


def serve_until(recorder: Recorder, sock: socket.socket, done: Callable[[], bool]) -> None:
    """Run uvicorn with the paced protocol on a ``PacedLoop`` until ``done()``."""
    config = uvicorn.Config(recorder.app, http=recorder.protocol(), lifespan="off",
                            interface="asgi3", log_level="warning", backlog=4096,
                            timeout_graceful_shutdown=5)  # (a regression fails, not hangs)
    server = uvicorn.Server(config)

    async def main() -> None:
        async def ticker() -> None:
            while True:
                await asyncio.sleep(0)  # one step per turn of the loop
                recorder.turn += 1

        tick = asyncio.ensure_future(ticker())
        serving = asyncio.ensure_future(server.serve(sockets=[sock]))
        give_up = time.monotonic() + 120  # a safety net, not a figure: a hang fails
        while not done() and time.monotonic() < give_up:
            await asyncio.sleep(0.01)
        server.should_exit = True
        await serving
        tick.cancel()

    loop = PacedLoop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def post(body: bytes, keep_alive: bool = False) -> bytes:
    return (b"POST /score HTTP/1.1\r\nhost: t\r\n"
            + (b"" if keep_alive else b"connection: close\r\n")
            + f"content-length: {len(body)}\r\n\r\n".encode() + body)


def read_answer(conn: socket.socket) -> tuple[int, bytes]:
    """One response from ``conn``: (status, body)."""
    raw = b""
    while b"\r\n\r\n" not in raw:
        chunk = conn.recv(65536)
        assert chunk, raw
        raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += conn.recv(65536)
    return int(head.split(b" ")[1]), body


def test_a_burst_is_accepted_and_parsed_a_bounded_share_per_turn_and_the_probe_goes_ahead(
) -> None:
    n = 600
    recorder = Recorder()
    sock = socket.create_server(("127.0.0.1", 0), backlog=4096)
    port = sock.getsockname()[1]
    clients = []
    for k in range(n):  # every connection and its request queued before the loop turns once
        conn = socket.create_connection(("127.0.0.1", port))
        conn.sendall(post(str(k).encode()))
        clients.append(conn)
    probe = socket.create_connection(("127.0.0.1", port))
    probe.sendall(b"GET /healthz HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
    try:
        serve_until(recorder, sock, lambda: len(recorder.started) == n + 1)
        for k, conn in enumerate(clients):
            assert read_answer(conn) == (200, hashlib.sha256(str(k).encode()).hexdigest().encode())
        assert read_answer(probe)[0] == 200
    finally:
        for conn in [*clients, probe]:
            conn.close()
    accepted = Counter(recorder.made)
    assert max(accepted.values()) <= listener.ACCEPTS_PER_TURN
    assert len(accepted) >= n // listener.ACCEPTS_PER_TURN + 1
    started = Counter(turn for turn, _ in recorder.started)
    assert max(started.values()) <= http_protocol.READS_PER_TURN + http_protocol.PROBES_PER_TURN
    paths = [path for _, path in recorder.started]
    ahead = paths.index("/healthz")
    assert ahead < n // 2, f"the probe started after {ahead} of the {n} requests before it"


@pytest.fixture
def slow_pacer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two arrivals a turn, and a waiting connection stops reading past 1 KB: every body
    below waits and pauses several times."""
    monkeypatch.setattr(http_protocol, "READS_PER_TURN", 2)
    monkeypatch.setattr(http_protocol, "STASH_PAUSE_BYTES", 1024)


def test_bodies_and_kept_alive_connections_reach_the_app_intact_while_waiting(slow_pacer: None
                                                                               ) -> None:
    connections, per_connection = 24, 3
    bodies = {(c, r): bytes([c, r]) * (100_000 + 997 * c + r)
              for c in range(connections) for r in range(per_connection)}
    recorder = Recorder()
    sock = socket.create_server(("127.0.0.1", 0), backlog=4096)
    port = sock.getsockname()[1]
    answers: dict[tuple[int, int], tuple[int, bytes]] = {}

    def client(c: int) -> None:  # one kept-alive connection, its requests one after another
        with socket.create_connection(("127.0.0.1", port), timeout=120) as conn:
            for r in range(per_connection):
                conn.sendall(post(bodies[c, r], keep_alive=True))
                answers[c, r] = read_answer(conn)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(connections)]
    for thread in threads:
        thread.start()
    serve_until(recorder, sock, lambda: len(answers) == len(bodies))
    for thread in threads:
        thread.join(timeout=60)
    assert answers == {key: (200, hashlib.sha256(body).hexdigest().encode())
                       for key, body in bodies.items()}


def run_clients(recorder: Recorder, *clients: Callable[[int], None]) -> None:
    """Each client (given the port) in a thread of its own against a paced server, until
    all are done."""
    sock = socket.create_server(("127.0.0.1", 0), backlog=4096)
    port = sock.getsockname()[1]
    threads = [threading.Thread(target=client, args=(port,)) for client in clients]
    for thread in threads:
        thread.start()
    serve_until(recorder, sock, lambda: not any(t.is_alive() for t in threads))


def test_a_request_head_past_the_bound_is_refused_and_never_parsed_further() -> None:
    """A header of 1 MB sent 4 KB at a time (httptools grew it chunk by chunk: 200 MB held
    the loop 5 s): a 431 once 64 KB have come, the connection closed, the app never called."""
    answers: list[bytes] = []

    def huge_header(port: int) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
            conn.sendall(b"GET /score HTTP/1.1\r\nhost: t\r\nx-big: ")
            try:
                for _ in range(256):
                    conn.sendall(b"a" * 4096)
            except OSError:  # closed under it: what it sent past the 431
                pass
            raw = b""
            while chunk := conn.recv(65536):
                raw += chunk
            answers.append(raw)

    recorder = Recorder()
    run_clients(recorder, huge_header)
    assert answers[0].startswith(b"HTTP/1.1 431 "), answers[0][:100]
    assert recorder.started == []


def test_a_connection_without_a_whole_head_in_time_is_closed_but_a_slow_answer_is_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection that sends nothing, and one that stops in the middle of its headers,
    are closed once HEAD_TIMEOUT_S passes; a request whose answer takes four times that
    is answered."""
    monkeypatch.setattr(http_protocol, "HEAD_TIMEOUT_S", 0.25)
    seen: dict[str, bytes] = {}

    def read_all(conn: socket.socket) -> bytes:
        raw = b""
        while chunk := conn.recv(65536):
            raw += chunk
        return raw

    def silent(port: int) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
            seen["silent"] = read_all(conn)

    def half_head(port: int) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
            conn.sendall(b"POST /score HTTP/1.1\r\nhost: t\r\n")
            seen["half"] = read_all(conn)

    def slow_answer(port: int) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
            conn.sendall(b"GET /slow HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
            seen["slow"] = read_all(conn)

    recorder = Recorder()
    run_clients(recorder, silent, half_head, slow_answer)
    assert seen["silent"] == b"" and seen["half"] == b""
    assert seen["slow"].startswith(b"HTTP/1.1 200 ")
    assert [path for _, path in recorder.started] == ["/slow"]


def read_all(conn: socket.socket) -> bytes:
    raw = b""
    try:
        while chunk := conn.recv(65536):
            raw += chunk
    except ConnectionResetError:
        pass
    return raw


def test_a_body_not_complete_in_time_is_answered_408_and_its_request_sees_its_client_gone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A head, then part of a body and nothing more: once BODY_TIMEOUT_S passes, a 408 and
    the connection closes (it held a connection, a task and its caller's request cap for
    good). A body that comes whole in time is answered."""
    monkeypatch.setattr(http_protocol, "BODY_TIMEOUT_S", 0.25)
    seen: dict[str, bytes] = {}

    def stalled(port: int) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
            conn.sendall(post(b"x" * 1000)[:-500])
            seen["stalled"] = read_all(conn)

    def whole(port: int) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
            conn.sendall(post(b"y" * 1000))
            seen["whole"] = read_all(conn)

    recorder = Recorder()
    run_clients(recorder, stalled, whole)
    assert seen["stalled"].startswith(b"HTTP/1.1 408 "), seen["stalled"][:200]
    assert b"request body not complete" in seen["stalled"]
    assert seen["whole"].startswith(b"HTTP/1.1 200 ")


@pytest.fixture
def every_address_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loopback addresses told apart (one quota in the server), so one host plays two."""
    from reward_server import connections

    monkeypatch.setattr(connections, "quota_of", lambda host: host)
    monkeypatch.setenv(http_protocol.MAX_CONNECTIONS_ENV, "8")


def open_connections() -> int:
    """Connections the running server's loop counts (the newest ``Connections``)."""
    ledgers = list(http_protocol._connections.values())
    return ledgers[-1].open if ledgers else 0


def until(check: Callable[[], bool]) -> None:
    give_up = time.monotonic() + 60  # a safety net, not a figure
    while not check():
        assert time.monotonic() < give_up
        time.sleep(0.01)


def still_open(conn: socket.socket) -> bool:
    conn.setblocking(False)
    try:
        return conn.recv(1) != b""
    except BlockingIOError:
        return True
    except ConnectionResetError:
        return False


def test_a_full_process_closes_the_idle_connections_of_the_address_holding_most(
        every_address_its_own: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight connections allowed. 127.0.0.3 keeps one alive between requests, 127.0.0.2
    holds seven that send nothing. A caller from 127.0.0.1 then connects: it is served,
    and the room came from 127.0.0.2's oldest, not from 127.0.0.3's one idle connection,
    which still answers. (No head deadline in this test: it is not what closes them.)"""
    monkeypatch.setattr(http_protocol, "HEAD_TIMEOUT_S", 600.0)
    outcome: dict[str, Any] = {}

    def client(port: int) -> None:
        def connect(source: str) -> socket.socket:
            return socket.create_connection(("127.0.0.1", port), source_address=(source, 0),
                                            timeout=60)

        with connect("127.0.0.3") as kept:
            kept.sendall(post(b"first", keep_alive=True))
            outcome["kept first"] = read_answer(kept)[0]
            flood = [connect("127.0.0.2") for _ in range(7)]
            until(lambda: open_connections() == 8)
            with connect("127.0.0.1") as new:
                new.sendall(post(b"new"))
                outcome["newcomer"] = read_answer(new)[0]
            kept.sendall(post(b"second", keep_alive=True))
            outcome["kept second"] = read_answer(kept)[0]
            outcome["flood open"] = [still_open(c) for c in flood]
            for conn in flood:
                conn.close()

    recorder = Recorder()
    run_clients(recorder, client)
    assert outcome == {"kept first": 200, "newcomer": 200, "kept second": 200,
                       "flood open": [False] + [True] * 6}


def test_a_full_process_refuses_the_address_holding_the_most_and_takes_room_from_it(
        every_address_its_own: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight connections allowed, all held by 127.0.0.1 with answers pending (a caller's
    heads whose bodies never come, answers it never reads: busy is no shelter). Its ninth is
    a 503 with Retry-After (it holds the most); a connection from 127.0.0.2 is served, and
    the room came from 127.0.0.1's connection busy longest, whose request sees it gone."""
    monkeypatch.setattr(http_protocol, "HEAD_TIMEOUT_S", 2.0)
    recorder = Recorder()
    outcome: dict[str, Any] = {"slow": []}
    lock = threading.Lock()

    def slow(port: int) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
            conn.sendall(b"GET /slow HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
            answer = read_all(conn)
            with lock:
                outcome["slow"].append(answer[:12])

    def others(port: int) -> None:
        until(lambda: len(recorder.started) == 8)  # the eight wait for their answers
        with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
            outcome["ninth"] = read_all(conn)
        with socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.2", 0),
                                      timeout=60) as conn:
            conn.sendall(post(b"other"))
            outcome["other address"] = read_answer(conn)[0]

    run_clients(recorder, *[slow] * 8, others)
    assert outcome["ninth"].startswith(b"HTTP/1.1 503 "), outcome["ninth"][:200]
    assert b"retry-after: 1" in outcome["ninth"]
    assert outcome["other address"] == 200
    assert sorted(outcome["slow"]) == [b""] + [b"HTTP/1.1 200"] * 7


def test_a_pipelined_request_being_answered_keeps_its_connection_busy(
        every_address_its_own: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two requests sent together on one connection: once the first is answered the second
    runs, and the connection is not idle (it would be closed for a newcomer's room)."""
    monkeypatch.setattr(http_protocol, "HEAD_TIMEOUT_S", 0.5)
    recorder = Recorder()
    seen: dict[str, Any] = {}

    def client(port: int) -> None:
        with socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.3", 0),
                                      timeout=60) as conn:
            conn.sendall(b"GET /fast HTTP/1.1\r\nhost: t\r\n\r\n"
                         b"GET /slow HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
            seen["first"] = read_answer(conn)[0]
            until(lambda: [p for _, p in recorder.started] == ["/fast", "/slow"])
            seen["idle while the second runs"] = (
                list(http_protocol._connections.values())[-1].holding("127.0.0.3")[0])
            seen["second"] = read_all(conn)[:12]

    run_clients(recorder, client)
    assert seen == {"first": 200, "idle while the second runs": 0, "second": b"HTTP/1.1 200"}


def test_requests_pipelined_past_the_bound_abort_their_connection() -> None:
    """A thousand requests in one write (each parsed in the same call, each with its own
    queued state: 24 MB of them took 1.9 GB): past MAX_PIPELINED behind the one being
    answered the connection is aborted, and no more of them start."""
    recorder = Recorder()
    seen: dict[str, Any] = {}

    def client(port: int) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
            conn.sendall(b"GET /slow HTTP/1.1\r\nhost: t\r\n\r\n"
                         + b"GET /fast HTTP/1.1\r\nhost: t\r\n\r\n" * 1000)
            seen["answer"] = read_all(conn)

    run_clients(recorder, client)
    assert seen["answer"] == b""
    assert len(recorder.started) <= 1 + http_protocol.MAX_PIPELINED


def test_a_client_that_does_not_read_its_answer_is_aborted_after_the_write_deadline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An answer of 8 MB to a client that reads none of it: once its reading has lagged
    WRITE_TIMEOUT_S, the connection is aborted and its descriptor freed (it held the
    connection and its caller's request for good). One that reads is answered whole."""
    monkeypatch.setattr(http_protocol, "WRITE_TIMEOUT_S", 0.5)
    recorder = Recorder()
    seen: dict[str, Any] = {}

    def stalled(port: int) -> None:
        with socket.socket() as conn:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # (fills at once)
            conn.settimeout(60)
            conn.connect(("127.0.0.1", port))
            conn.sendall(b"GET /big HTTP/1.1\r\nhost: t\r\n\r\n")
            # both answered, and every connection gone: the reader's by its close, its own
            # only by the deadline (it reads nothing until then)
            until(lambda: len(recorder.started) == 2 and open_connections() == 0)
            seen["stalled"] = len(read_all(conn)) < 8 << 20

    def reader(port: int) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
            conn.sendall(b"GET /big HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
            seen["reader"] = len(read_all(conn))

    run_clients(recorder, stalled, reader)
    assert seen["stalled"] is True
    assert seen["reader"] > 8 << 20  # (the head and all 8 MB)


def test_an_evicted_connection_frees_its_descriptor_with_answers_still_unsent(
        every_address_its_own: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection idle between requests whose client read none of its last answer (it
    waits in the server's buffers): closed for a newcomer's room, its descriptor goes at
    once (a close would wait for the answer to go out, for good)."""
    # (no deadline here may close it: only the eviction)
    monkeypatch.setattr(http_protocol, "HEAD_TIMEOUT_S", 600.0)
    monkeypatch.setattr(http_protocol, "WRITE_TIMEOUT_S", 600.0)
    monkeypatch.setenv(http_protocol.MAX_CONNECTIONS_ENV, "1")
    recorder = Recorder()
    seen: dict[str, Any] = {}

    def server_descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    def client(port: int) -> None:
        stuck = socket.socket()
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stuck.bind(("127.0.0.2", 0))
        stuck.connect(("127.0.0.1", port))
        stuck.sendall(b"GET /big HTTP/1.1\r\nhost: t\r\n\r\n")
        until(lambda: len(recorder.started) == 1)
        time.sleep(0.5)  # (the answer fills the buffers: the app is done, the client is not)
        before = server_descriptors()
        with socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.3", 0),
                                      timeout=60) as new:
            new.sendall(post(b"new"))
            seen["newcomer"] = read_answer(new)[0]
        # the evicted one's server side, while its client still has read nothing
        until(lambda: server_descriptors() <= before - 1)
        seen["freed"] = True
        stuck.close()

    run_clients(recorder, client)
    assert seen == {"newcomer": 200, "freed": True}
