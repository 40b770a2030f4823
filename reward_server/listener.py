"""A burst of connections costs the event loop a bounded amount per turn.

uvloop's server accepts every connection waiting in the kernel's queue in one callback and
starts each (transport, uvicorn's protocol, its address look-ups: five system calls) in one
batch of the next turn; then every request that arrived together is read and parsed in one
poll. A rollout fleet's burst makes thousands of each at once: at 16,000 in flight one turn
lasted a quarter of a second in native code (14,000 requests read in one poll), and
everything waited that long: a ``/healthz`` probe, another caller's request, answers
already computed.

So each stage takes a bounded share of a turn, first come first served:

- ``PacedListener`` accepts at most 256 connections each time the listening socket is
  ready (the rest wait in the kernel's queue for the next turn), started through
  ``loop.connect_accepted_socket`` with uvicorn's protocol;
- ``PacedHttpToolsProtocol`` hands at most 64 arrivals of request bytes per turn to the
  HTTP parser (``ReadPacer``); the others are kept in order until their turn. A request
  that starts ``GET /healthz`` never waits: a probe is not a caller's work.

At the loop's pace that still accepts and parses thousands a second, more than the
requests it can answer. What the requests cost after parsing is shared by the turnstile
(``turnstile``, per caller) and the fair gates (``fair_queue``).

``PacedLoop`` is uvloop's loop with ``PacedListener`` in place of its server for a given
socket, and ``serve`` runs uvicorn on it with the paced protocol: one process, or
``--workers K`` (each worker accepts from the socket the supervisor bound).
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import logging
import os
import shutil
import socket
import tempfile
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

import uvicorn
import uvloop
from uvicorn.config import STARTUP_FAILURE
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.supervisors import Multiprocess

from reward_server.steering import STEERING_ENV, claimed_index, steered_sockets

log = logging.getLogger("reward_server")

# descriptors or memory ran out: accepting again at once would spin; asyncio waits as long
RETRY_AFTER_EXHAUSTED_S = 1.0
EXHAUSTED = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


ACCEPTS_PER_TURN = 256


class PacedListener:
    """Accepts at most ``per_turn`` connections per turn of the loop from ``sock``, each
    started with ``protocol_factory``. ``close()`` as uvicorn closes its servers."""

    def __init__(self, sock: socket.socket, protocol_factory: Callable[[], asyncio.Protocol],
                 per_turn: int = ACCEPTS_PER_TURN) -> None:
        if per_turn < 1:
            raise ValueError(f"per_turn must be at least 1, got {per_turn}")
        self.sock = sock
        self.protocol_factory = protocol_factory
        self.per_turn = per_turn
        self.loop = asyncio.get_running_loop()
        self.sockets = [sock]
        self._closed = False
        self._starting: set[asyncio.Task[None]] = set()
        sock.setblocking(False)
        self.loop.add_reader(sock.fileno(), self._accept)

    def _accept(self) -> None:
        for _ in range(self.per_turn):
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:  # the client gave up in the queue
                continue
            except OSError as exc:
                if exc.errno not in EXHAUSTED:
                    raise
                log.error("cannot accept connections (%s); again in %.0f s", exc,
                          RETRY_AFTER_EXHAUSTED_S)
                self.loop.remove_reader(self.sock.fileno())
                self.loop.call_later(RETRY_AFTER_EXHAUSTED_S, self._resume)
                return
            conn.setblocking(False)
            task = self.loop.create_task(self._start(conn))
            self._starting.add(task)
            task.add_done_callback(self._starting.discard)

    async def _start(self, conn: socket.socket) -> None:
        try:
            await self.loop.connect_accepted_socket(self.protocol_factory, conn)
        except OSError:  # gone before it started
            conn.close()

    def _resume(self) -> None:
        if not self._closed:
            self.loop.add_reader(self.sock.fileno(), self._accept)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.loop.remove_reader(self.sock.fileno())
            self.sock.close()

    async def wait_closed(self) -> None:
        return None


READS_PER_TURN = 64
PROBES_PER_TURN = 4


class ReadPacer:
    """Per event loop: at most ``per_turn`` arrivals of request bytes are handed to the HTTP
    parser per turn of the loop; the rest wait, first come first served, and go first in
    the next turns. Up to ``probes_per_turn`` probes of ``/healthz`` more go at once (a
    flood of them waits like the rest)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, per_turn: int = READS_PER_TURN,
                 probes_per_turn: int = PROBES_PER_TURN) -> None:
        self.loop = loop
        self.per_turn = per_turn
        self.probes_per_turn = probes_per_turn
        self.budget = per_turn
        self.probes = probes_per_turn
        self.waiting: deque[PacedHttpToolsProtocol] = deque()
        self._scheduled = False

    def take(self) -> bool:
        """One arrival may be parsed now (True), or it must wait its turn."""
        if self.budget <= 0 or self.waiting:
            return False
        self.budget -= 1
        self._next_turn()
        return True

    def take_probe(self) -> bool:
        """A probe may be parsed now, ahead of those waiting (True)."""
        if self.probes <= 0:
            return False
        self.probes -= 1
        self._next_turn()
        return True

    def wait(self, protocol: PacedHttpToolsProtocol) -> None:
        self.waiting.append(protocol)
        self._next_turn()

    def _next_turn(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._turn)  # runs in the next turn

    def _turn(self) -> None:
        self._scheduled = False
        self.budget, self.probes = self.per_turn, self.probes_per_turn
        while self.waiting and self.budget > 0:
            self.budget -= 1
            self.waiting.popleft().parse_waiting()
        if self.waiting:
            self._next_turn()


_pacers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ReadPacer] = (
    weakref.WeakKeyDictionary())


def read_pacer() -> ReadPacer:
    """The running loop's pacer."""
    loop = asyncio.get_running_loop()
    pacer = _pacers.get(loop)
    if pacer is None:
        pacer = _pacers[loop] = ReadPacer(loop, READS_PER_TURN, PROBES_PER_TURN)
    return pacer


PROBE = b"GET /healthz"
STASH_PAUSE_BYTES = 64 * 1024  # a waiting connection's bytes held before it stops reading


MAX_HEAD_BYTES = 64 * 1024  # a request line and headers; more is a 431
HEAD_TIMEOUT_S = 30.0  # from a connection's start (or its last answer) to complete headers
LINGER_S = 2.0  # a refused connection's bytes are read and dropped this long, then it closes


class PacedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol whose bytes reach the parser when the ``ReadPacer``
    lets them: kept in arrival order meanwhile, and the connection stops reading if a
    waiting one sends more than ``STASH_PAUSE_BYTES``.

    Two bounds uvicorn's httptools protocol does not have: a request's line and headers
    may take ``MAX_HEAD_BYTES`` (httptools grows a header chunk by chunk, so a 200 MB one
    held the loop 5 s: past the bound it is a 431 and the connection closes), and must be
    complete within ``HEAD_TIMEOUT_S`` of the connection's start or its previous answer
    (a connection that sends nothing, or a header a byte a minute, held a descriptor for
    good: 300 of them took a server of 256 descriptors down). Time spent waiting for the
    pacer is the server's, not counted."""

    _waiting: bytearray | None = None  # what arrived while it waits its turn
    _reading_head = True
    _head_bytes = 0
    _head_timer: asyncio.TimerHandle | None = None
    _discarding = False  # refused: what comes is dropped until the connection closes
    _pacer: ReadPacer

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._pacer = read_pacer()  # (its loop's: found once, not on every arrival)
        self._start_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            return
        if self._waiting is None:
            pacer = self._pacer
            if pacer.take() or (data.startswith(PROBE) and pacer.take_probe()):
                return self._parse(data)
            self._waiting = bytearray()
            pacer.wait(self)
        self._waiting += data  # (one buffer: a flood of tiny chunks costs only its bytes)
        if len(self._waiting) > STASH_PAUSE_BYTES:
            self.transport.pause_reading()

    def parse_waiting(self) -> None:
        """Its turn: what arrived meanwhile goes to the parser (not if the connection went)."""
        data = bytes(self._waiting or b"")
        self._waiting = None
        if self.parser is None or self.transport.is_closing():
            return
        self._parse(data)
        if (len(data) > STASH_PAUSE_BYTES and not self.transport.is_closing()
                and not self.flow.read_paused):
            self.transport.resume_reading()  # (unless the parser's own flow control paused it)

    def _parse(self, data: bytes) -> None:
        if self._reading_head:  # (on_headers_complete, during the feed, resets the count)
            if self._head_bytes > MAX_HEAD_BYTES:
                return self._refuse_head()
            self._head_bytes += len(data)
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._reading_head, self._head_bytes = False, 0
        self._stop_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._reading_head = True  # (a pipelined request's head counts from here)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():  # the next request's time starts now
            self._start_head_timer()

    def _start_head_timer(self) -> None:
        self._stop_head_timer()
        self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_late)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if not self._reading_head or self.transport.is_closing():
            return
        if self._waiting is not None or (self.cycle is not None
                                         and not self.cycle.response_complete):
            return self._start_head_timer()  # the server's turn (the pacer, an answer)
        self.transport.close()

    def _refuse_head(self) -> None:
        """A 431, then what the client still sends is read and dropped for ``LINGER_S``
        before the connection closes (closed at once over unread bytes, the kernel resets
        it and the client may never read the answer)."""
        self._discarding = True
        self._stop_head_timer()
        if self.cycle is None or self.cycle.response_complete:  # (not into a response)
            body = (b'{"detail": "request line and headers: more than %d bytes"}'
                    % MAX_HEAD_BYTES)
            self.transport.write(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                b"content-type: application/json\r\nconnection: close\r\n"
                b"content-length: %d\r\n\r\n" % len(body) + body)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)


class _NotServed:
    """Another worker's socket of a steered group (``steering``): this process leaves it."""

    sockets: list[socket.socket] = []

    def close(self) -> None:
        return None

    async def wait_closed(self) -> None:
        return None


_handed = itertools.count()  # the sockets uvicorn hands this process, in its order


class PacedLoop(uvloop.Loop):
    """uvloop's loop whose servers on a given socket accept through ``PacedListener``
    (uvicorn's ``loop`` setting names it; ``serve`` always hands uvicorn the socket). Of a
    steered group's sockets (``steering``), it serves the one this process claimed."""

    async def create_server(self, protocol_factory: Callable[[], asyncio.Protocol],
                            host: Any = None, port: Any = None, *,
                            sock: socket.socket | None = None, backlog: int = 100,
                            ssl: Any = None, **kwargs: Any) -> Any:
        if sock is None or ssl is not None or kwargs.get("start_serving") is False:
            return await super().create_server(protocol_factory, host, port, sock=sock,
                                               backlog=backlog, ssl=ssl, **kwargs)
        steering = os.environ.get(STEERING_ENV)
        if steering:
            workers, _, directory = steering.partition(":")
            if next(_handed) != claimed_index(directory, int(workers)):
                sock.close()  # this process's copy; the supervisor and its worker keep theirs
                return _NotServed()
        sock.listen(backlog)
        return PacedListener(sock, protocol_factory, ACCEPTS_PER_TURN)


def serve(app: Any, route_by_caller: bool = True, **settings: Any) -> None:
    """``uvicorn.run(app, **settings)`` with the sockets bound here, so every process (one,
    or ``workers`` under uvicorn's supervisor) accepts on a ``PacedLoop``; with workers and
    ``route_by_caller``, each caller's connections reach one of them (``steering``)."""
    config = uvicorn.Config(app, loop=f"{__name__}:PacedLoop", http=PacedHttpToolsProtocol,
                            **settings)
    server = uvicorn.Server(config)
    locks, sockets = None, []
    if config.workers > 1 and route_by_caller:
        try:
            sockets = steered_sockets(config.host, config.port, config.workers)
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
                log.error("cannot listen on %s:%d: %s", config.host, config.port, exc.strerror)
                raise SystemExit(STARTUP_FAILURE) from None
            # a kernel or sandbox without SO_REUSEPORT programs
            log.warning("cannot send each caller to one process (%s): the kernel spreads "
                        "connections, and the caps count per process", exc)
    if sockets:
        locks = tempfile.mkdtemp(prefix="reward-server-workers-")
        os.environ[STEERING_ENV] = f"{config.workers}:{locks}"  # the workers inherit it
        log.info("serving on %s:%d, %d processes, each caller's connections to one of them",
                 config.host, config.port, config.workers)
    else:
        sockets = [config.bind_socket()]
    try:
        if config.workers > 1:
            Multiprocess(config, sockets=sockets).run()
        else:
            server.run(sockets=sockets)
    finally:
        for sock in sockets:
            sock.close()
        if locks is not None:
            shutil.rmtree(locks, ignore_errors=True)
    if config.workers == 1 and not server.started:
        raise SystemExit(STARTUP_FAILURE)
