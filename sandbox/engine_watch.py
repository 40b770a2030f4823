"""Whether a Docker engine dropped its streams: an open /events stream to it, whose end tells.

A container's attach stream ends when its harness ends (the memory backstop killed it: the
program's doing) or when dockerd lets go of it: dockerd stopped, crashed or restarted. A
restart quicker than the health checks, or one under live-restore (the containers run on,
their streams do not), leaves an engine that answers by the time anyone asks, so the health
checks cannot tell the two apart, and a correct program's run was scored a runtime error.

dockerd ends every stream it serves together, this one too, and no program can end this one:
it is dockerd's own connection to the pool, carrying nothing of any container's. So a run whose
stream closed while this watch's stream ended too lost it to the engine. The watch counts its
stream's ends (``drops``); a run notes the count when its job is sent and asks, on a closed
stream, whether it moved (``dropped_since``). Each end is one blocking read's, on a thread of
the watch's own, which reconnects once the engine answers.

A dockerd that hangs (stopped, or stalled on its own locks) and then recovers ends no stream:
it only holds them, and a harness's answer sent in time reaches the run after its deadline.
By the time the run asks, the engine serves, and the silence looked like the program's
timeout (0). A second thread pings the engine every ``PING_EVERY_S``; a gap of more than
``STALL_S`` between two answers is a stall (``stalled_since``), which no program can cause:
the ping is dockerd's own, answered before any container is asked anything."""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from typing import Any

from docker.constants import MINIMUM_DOCKER_API_VERSION
from docker.errors import DockerException

from sandbox.engine_health import EngineHealth
from sandbox.tls import engine_client

log = logging.getLogger(__name__)

RECONNECT_S = 1.0  # between tries to open the stream while the engine does not answer
# a closed stream waits this long for the watch's stream to end too: both end as dockerd
# exits, and the watch's thread sees its end within milliseconds of the run's
DROP_GRACE_S = 2.0
DROP_POLL_S = 0.05
PING_EVERY_S = 1.0
# an engine that answers no ping for this long stalled: a busy dockerd on a loaded machine
# answers in well under a second, and a run's own checks wait no longer than this either
STALL_S = 3.0
STALLS_KEPT = 32


class EngineWatch:
    """An /events stream to the engine at ``host`` (None: DOCKER_HOST or the local socket),
    held open on a thread while ``start``ed."""

    def __init__(self, host: str | None, tls_cert_path: str | None, label: str) -> None:
        self.host, self.tls_cert_path, self.label = host, tls_cert_path, label
        self.drops = 0  # how many times the stream ended while open
        self.connected = False
        self._stream: Any = None
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._answered: float | None = None  # the last ping's answer (monotonic)
        self._stalls: collections.deque[float] = collections.deque(maxlen=STALLS_KEPT)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sandbox-engine-watch",
                                        daemon=True)
        self._thread.start()
        threading.Thread(target=self._ping, name="sandbox-engine-ping", daemon=True).start()

    def stalled_since(self, since: float) -> bool:
        """Whether the engine stalled (answered no ping for over ``STALL_S``) at any time
        after ``since`` (monotonic), the stall still going on included. False while the
        pings have never been answered: nothing can be told."""
        answered = self._answered
        if answered is None:
            return False
        if time.monotonic() - answered > STALL_S:
            return True
        return any(ended > since for ended in list(self._stalls))

    def mark(self) -> int | None:
        """What a run notes as its job is sent: the count of ends, or None while the stream
        is not open (an end then would go unseen, and nothing can be told)."""
        return self.drops if self.connected else None

    async def dropped_since(self, mark: int | None) -> bool:
        """Whether the stream ended after ``mark`` (``mark``), waiting up to
        ``DROP_GRACE_S`` for an end that came with the caller's own."""
        if mark is None:
            return False
        deadline = time.monotonic() + DROP_GRACE_S
        while self.drops == mark:
            if time.monotonic() >= deadline or self._closed.is_set():
                return False
            await asyncio.sleep(DROP_POLL_S)
        return True

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            stream = self._stream
        if stream is not None:
            try:
                stream.close()  # wakes the thread's read
            except Exception:  # noqa: BLE001 - already broken: nothing to close
                pass

    def _ping(self) -> None:
        """Pings as the health checks do (``EngineHealth.answers``), on a client of its own
        whose reads give up at ``STALL_S``; each gap of more than that between answers is
        kept by when it ended."""
        health = EngineHealth(self.host, self.tls_cert_path, STALL_S)
        while not self._closed.wait(PING_EVERY_S):
            if not health.answers("/_ping"):
                continue  # unanswered, however: the gap grows
            now = time.monotonic()
            if self._answered is not None and now - self._answered > STALL_S:
                self._stalls.append(now)
                log.warning("sandbox: Docker engine %s answered no ping for %.1f s",
                            self.host or "(default)", now - self._answered)
            self._answered = now

    def _run(self) -> None:
        api = None
        while not self._closed.is_set():
            try:
                if api is None:
                    # a fixed API version: made without asking the engine anything (the
                    # SDK reads /events with no timeout, so none is given)
                    api = engine_client(self.host, self.tls_cert_path,
                                        version=MINIMUM_DOCKER_API_VERSION).api
                stream = api.events(filters={"label": [self.label]})
            except (DockerException, OSError):
                self._closed.wait(RECONNECT_S)
                continue
            with self._lock:
                self._stream = stream
            self.connected = True
            try:
                for _ in stream:  # the pool's own containers' events: only the end matters
                    pass
            except Exception:  # noqa: BLE001 - however the read ended (a reset, a close)
                pass
            self.connected = False
            with self._lock:
                self._stream = None
            if self._closed.is_set():
                return
            self.drops += 1
            log.warning("sandbox: Docker engine %s dropped its event stream (it stopped or "
                        "restarted): a stream that closed with it was the engine's",
                        self.host or "(default)")
            self._closed.wait(RECONNECT_S)
