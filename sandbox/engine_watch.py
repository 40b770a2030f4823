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
the watch's own, which reconnects once the engine answers."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from docker.constants import MINIMUM_DOCKER_API_VERSION
from docker.errors import DockerException

from sandbox.tls import engine_client

log = logging.getLogger(__name__)

RECONNECT_S = 1.0  # between tries to open the stream while the engine does not answer
# a closed stream waits this long for the watch's stream to end too: both end as dockerd
# exits, and the watch's thread sees its end within milliseconds of the run's
DROP_GRACE_S = 2.0
DROP_POLL_S = 0.05


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

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sandbox-engine-watch",
                                        daemon=True)
        self._thread.start()

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
