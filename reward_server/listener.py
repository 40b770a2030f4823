"""A burst of connections costs the event loop a bounded amount per turn.

uvloop's server accepts every connection waiting in the kernel's queue in one callback and
starts each (transport, uvicorn's protocol, its address look-ups: five system calls) in one
batch of the next turn: a rollout fleet's burst made one turn of the loop last a quarter of a
second at 16,000 in flight, and everything waited that long (a ``/healthz`` probe, another
caller's request, answers already computed). So ``PacedListener`` accepts at most 256
connections each time the listening socket is ready (the rest wait in the kernel's queue for
the next turn), started through ``loop.connect_accepted_socket`` with the paced protocol
(``http_protocol``: how many requests are parsed per turn, the bounds on heads and bodies,
the count of connections).

``PacedLoop`` is uvloop's loop with ``PacedListener`` in place of its server for a given
socket, and ``serve`` runs uvicorn on it with the paced protocol: one process, or
``--workers K`` (each worker accepts from a socket the supervisor bound).
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
from collections.abc import Callable
from typing import Any

import uvicorn
import uvloop
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import Multiprocess

from reward_server.http_protocol import MAX_CONNECTIONS_ENV, PacedHttpToolsProtocol, connections
from reward_server.steering import STEERING_ENV, claimed_index, steered_sockets

log = logging.getLogger("reward_server")

# descriptors or memory ran out: accepting again at once would spin; asyncio waits as long
RETRY_AFTER_EXHAUSTED_S = 1.0
EXHAUSTED = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


ACCEPTS_PER_TURN = 256
# when the process holds as many connections as it may, each newcomer closes an idle one
# (``connections``): a few per turn, so descriptors in transit stay well inside the reserve
ACCEPTS_PER_TURN_WHEN_FULL = 16


class PacedListener:
    """Accepts at most ``per_turn`` connections per turn of the loop from ``sock``, each
    started with ``protocol_factory``; no more than the process has room for (but a few,
    each of which closes an idle connection for its room: ``connections``), so accepted
    and starting connections never run the process out of descriptors. ``close()`` as
    uvicorn closes its servers."""

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
        self._connections = connections()
        sock.setblocking(False)
        self.loop.add_reader(sock.fileno(), self._accept)

    def _accept(self) -> None:
        room = self._connections.max_open - self._connections.open - len(self._starting)
        for _ in range(min(self.per_turn, max(room, ACCEPTS_PER_TURN_WHEN_FULL))):
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


def serve(app: Any, route_by_caller: bool = True, max_connections: int = 0,
          **settings: Any) -> None:
    """``uvicorn.run(app, **settings)`` with the sockets bound here, so every process (one,
    or ``workers`` under uvicorn's supervisor) accepts on a ``PacedLoop``; with workers and
    ``route_by_caller``, each caller's connections reach one of them (``steering``). Each
    process keeps at most ``max_connections`` open (0: what its descriptor limit leaves)."""
    os.environ[MAX_CONNECTIONS_ENV] = str(max_connections)  # (the workers inherit it)
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
