"""uvicorn's HTTP/1.1 protocol, with what a server facing thousands of callers needs of it.

- **Paced parsing.** Every request that arrived together is read and parsed in one poll: at
  16,000 in flight one turn of the loop lasted a quarter of a second (14,000 requests in
  one poll), and everything waited that long (a ``/healthz`` probe, another caller's
  request, answers already computed). So at most 64 arrivals of request bytes per turn
  go to the parser (``ReadPacer``), first come first served; the others are kept in order
  until their turn. A request that starts ``GET /healthz`` never waits: a probe is not a
  caller's work.
- **Bounded heads, bodies, pipelines and readers.** A request's line and headers may take
  ``MAX_HEAD_BYTES`` and must be complete within ``HEAD_TIMEOUT_S`` of the connection's
  start or its last answer; its body must be complete within ``BODY_TIMEOUT_S`` of its
  head (time spent waiting for the server, the pacer or a paused read, is not counted). At
  most ``MAX_PIPELINED`` requests wait behind the one being answered, and a client's
  reading may lag its answers ``WRITE_TIMEOUT_S``; past either, the connection is aborted.
- **Room for every caller.** Each connection is counted in its process's ``Connections``
  (``connections``): idle while no request of it is being answered, busy otherwise; when
  the process is full, the address holding the most gives one up (aborted: its descriptor
  goes at once), and a newcomer of that address is refused with a 503.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections import deque
from collections.abc import Callable
from http import HTTPStatus
from typing import TypeVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from reward_server import metrics
from reward_server.connections import Connections, default_max_open

MAX_CONNECTIONS_ENV = "REWARD_SERVER_MAX_CONNECTIONS"  # set by ``listener.serve``

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


T = TypeVar("T")


def _of_running_loop(registry: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T],
                     make: Callable[[asyncio.AbstractEventLoop], T]) -> T:
    """The running loop's one ``T``, made on first use (every server process, or test, runs
    its own loop)."""
    loop = asyncio.get_running_loop()
    found = registry.get(loop)
    if found is None:
        found = registry[loop] = make(loop)
    return found


_pacers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ReadPacer] = (
    weakref.WeakKeyDictionary())


def read_pacer() -> ReadPacer:
    """The running loop's pacer."""
    return _of_running_loop(_pacers,
                            lambda loop: ReadPacer(loop, READS_PER_TURN, PROBES_PER_TURN))


PROBE = b"GET /healthz"
STASH_PAUSE_BYTES = 64 * 1024  # a waiting connection's bytes held before it stops reading


MAX_HEAD_BYTES = 64 * 1024  # a request line and headers; more is a 431
HEAD_TIMEOUT_S = 30.0  # from a connection's start (or its last answer) to complete headers
BODY_TIMEOUT_S = 60.0  # from complete headers to a complete body (64 MB at ~1 MB/s)
LINGER_S = 2.0  # a refused connection's bytes are read and dropped this long, then it closes
LINGERING_REFUSALS = 64  # refused connections that linger at once; more are closed at once
WRITE_TIMEOUT_S = 60.0  # a client's reading may lag its answers this long
MAX_PIPELINED = 16  # requests queued on one connection behind the one being answered


class PipelinedTooDeep(Exception):
    """More requests pipelined on a connection than ``MAX_PIPELINED``: it is aborted."""


class PacedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol whose bytes reach the parser when the ``ReadPacer``
    lets them (kept in arrival order meanwhile; the connection stops reading if a waiting
    one sends more than ``STASH_PAUSE_BYTES``), with the bounds uvicorn's own does not
    have (the module docstring): a head past ``MAX_HEAD_BYTES`` (httptools grows a header
    chunk by chunk: a 200 MB one held the loop 5 s) or later than ``HEAD_TIMEOUT_S`` (300
    silent connections took a server of 256 descriptors down), a body later than
    ``BODY_TIMEOUT_S``, a pipeline deeper than ``MAX_PIPELINED``, a reader lagging more
    than ``WRITE_TIMEOUT_S``; and each connection counted in its process's ``Connections``.
    """

    _waiting: bytearray | None = None  # what arrived while it waits its turn
    _reading_head = True
    _head_bytes = 0
    _timer: asyncio.TimerHandle | None = None  # the head's or the body's deadline
    _write_timer: asyncio.TimerHandle | None = None  # the client's reading lags since
    _lingers_uncounted = False  # refused: counted in ``lingering`` until it closes
    _timer_s = HEAD_TIMEOUT_S
    _discarding = False  # refused: what comes is dropped until the connection closes
    _pacer: ReadPacer
    _connections: Connections

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._pacer = read_pacer()  # (its loop's: found once, not on every arrival)
        self._connections = ledger = connections()
        if ledger.admit(self, self.client[0] if self.client else None):
            return self._start_timer(HEAD_TIMEOUT_S)
        metrics.CONNECTIONS.labels("refused").inc()
        refusal = _answer(503, b"this server holds as many connections as it may and this "
                          b"address as many as any other; retry", b"retry-after: 1\r\n")
        if ledger.lingering >= LINGERING_REFUSALS:  # (each holds a descriptor meanwhile)
            transport.write(refusal)
            return transport.close()
        ledger.lingering += 1
        self._lingers_uncounted = True
        self._linger(refusal)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        self._stop_write_timer()
        self._connections.closed(self)
        if self._lingers_uncounted:
            self._connections.lingering -= 1
        super().connection_lost(exc)

    def evict(self) -> None:
        """Closed at once for another connection's room (``connections``): aborted, since a
        close waits for unsent answers to go out, and a client that reads nothing would
        keep the descriptor it no longer counts for."""
        metrics.CONNECTIONS.labels("evicted").inc()
        self._stop_timer()
        self.transport.abort()

    def pause_writing(self) -> None:
        """The client reads its answers slower than they come: it has ``WRITE_TIMEOUT_S``
        to catch up, or the connection is aborted (an answer it never reads held the
        connection, and the request its caller's cap, for good)."""
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(WRITE_TIMEOUT_S, self._write_late)

    def resume_writing(self) -> None:
        self._stop_write_timer()
        super().resume_writing()

    def _stop_write_timer(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _write_late(self) -> None:
        self._write_timer = None
        metrics.CONNECTIONS.labels("slow_reader").inc()
        self.transport.abort()

    def send_400_response(self, msg: str) -> None:
        if not self.transport.is_closing():  # (not after a connection aborted mid-parse)
            super().send_400_response(msg)

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
        if not self._reading_head and self._timer is None and self.parser is not None:
            self._start_timer(BODY_TIMEOUT_S)  # a body still to come (most come whole)

    def on_headers_complete(self) -> None:
        if (self.cycle is not None and not self.cycle.response_complete
                and len(self.pipeline) >= MAX_PIPELINED):
            # every request in one arrival is parsed in one call, each queued with its own
            # state: 24 MB of pipelined heads took 1.9 GB and held the loop for seconds
            metrics.CONNECTIONS.labels("pipelined").inc()
            self.transport.abort()
            raise PipelinedTooDeep  # (stops the parser in the middle of the arrival)
        self._reading_head, self._head_bytes = False, 0
        self._connections.busy(self)
        self._stop_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._stop_timer()
        super().on_message_complete()
        self._reading_head = True  # (a pipelined request's head counts from here)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:  # (no pipelined one started)
            self._connections.idle(self)
        self._start_timer(HEAD_TIMEOUT_S)  # the next request's time starts now

    def _start_timer(self, seconds: float) -> None:
        self._stop_timer()
        self._timer_s = seconds
        self._timer = self.loop.call_later(seconds, self._late)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _late(self) -> None:
        """A head or a body not complete in time: closed, unless the wait was the
        server's (bytes waiting for the pacer, reading paused, an answer pending)."""
        self._timer = None
        if self.transport.is_closing():
            return
        if self._waiting is not None or self.flow.read_paused:
            return self._start_timer(self._timer_s)
        if self._reading_head:
            if self.cycle is not None and not self.cycle.response_complete:
                return self._start_timer(self._timer_s)  # (its answer is being written)
            return self.transport.close()
        self._body_late()

    def _refuse_head(self) -> None:
        self._linger(None if self.cycle is not None and not self.cycle.response_complete
                     else _answer(431, b"request line and headers: more than %d bytes"
                                  % MAX_HEAD_BYTES))  # (not into another's answer)

    def _body_late(self) -> None:
        """The request whose body is late sees its client gone; a 408 if it has not
        begun its answer."""
        cycle = self.cycle
        assert cycle is not None
        late = _answer(408, b"request body not complete within %d s of its head"
                       % BODY_TIMEOUT_S)
        cycle.disconnected = True  # (what the app still sends is dropped)
        cycle.message_event.set()
        self._linger(None if cycle.response_started else late)

    def _linger(self, answer: bytes | None) -> None:
        """``answer``, then what the client still sends is read and dropped for
        ``LINGER_S`` before the connection closes (closed at once over unread bytes, the
        kernel resets it and the client may never read the answer)."""
        self._discarding = True
        self._stop_timer()
        if answer is not None:
            self.transport.write(answer)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.abort)  # (its answer had its time)


def _answer(status: int, detail: bytes, headers: bytes = b"") -> bytes:
    """A whole JSON error response that closes its connection."""
    body = b'{"detail": "%s"}' % detail
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\nconnection: close\r\n"
            b"%scontent-length: %d\r\n\r\n%s" % (status, HTTPStatus(status).phrase.encode(),
                                                  headers, len(body), body))


_connections: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Connections] = (
    weakref.WeakKeyDictionary())


def connections() -> Connections:
    """The running loop's count of connections, of ``REWARD_SERVER_MAX_CONNECTIONS`` (or,
    unset or 0, what the descriptor limit leaves: ``connections.default_max_open``)."""
    return _of_running_loop(_connections, lambda _: Connections(
        int(os.environ.get(MAX_CONNECTIONS_ENV) or 0) or default_max_open()))
