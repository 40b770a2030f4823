"""One Docker engine's health, as the pool judges it: its ping, then its /info.

A stopped engine misses its ping. A wedged one (its containerd stopped or hung) still answers
the ping, since dockerd answers that itself, and hangs on everything containerd takes part in:
/info, /version, starting, removing and inspecting containers. Its running containers' attach
streams, which dockerd copies itself, still carry their executions. So the ping alone passes a
wedged engine as fine, and the pool then spends a caller's turn on each call it makes there,
for the client's whole timeout.

Checks run on a thread and a client of their own, each request bounded by the check's
timeout: on the pool's threads they would queue behind the very calls a wedged engine holds."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import docker
from docker.constants import MINIMUM_DOCKER_API_VERSION
from docker.errors import DockerException

from sandbox.tls import engine_client

# ``serves``: its ping and /info answered; ``wedged``: the ping only; ``gone``: not the ping
EngineState = Literal["serves", "wedged", "gone"]


class EngineHealth:
    """Health checks of the engine at ``host`` (None: DOCKER_HOST or the local socket)."""

    def __init__(self, host: str | None, tls_cert_path: str | None, timeout_s: float) -> None:
        self.host = host
        self.tls_cert_path = tls_cert_path
        self.timeout_s = timeout_s
        # a few: runs whose containers died ask at once, each for up to timeout_s
        self._thread = ThreadPoolExecutor(max_workers=4, thread_name_prefix="sandbox-health")
        self._api: docker.APIClient | None = None
        # why the last request failed (a refused TLS certificate, a timeout), for the
        # reason the pool gives
        self.last_error: str | None = None

    async def state(self) -> EngineState:
        """One check: the ping, then /info, each within ``timeout_s``."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, self.probe)

    async def answers_ping(self) -> bool:
        """The ping alone, within ``timeout_s``."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, self.answers,
                                                                "/_ping")

    def probe(self) -> EngineState:
        """``state``, blocking."""
        if not self.answers("/_ping"):
            return "gone"
        return "serves" if self.answers("/info") else "wedged"

    def answers(self, path: str) -> bool:
        """Whether the engine answers ``GET path`` with a success within ``timeout_s``."""
        try:
            if self._api is None:
                # made with an API version given, so without asking the engine's (/version,
                # which a wedged engine never answers)
                self._api = engine_client(self.host, self.tls_cert_path,
                                          timeout=self.timeout_s,
                                          version=MINIMUM_DOCKER_API_VERSION).api
            # an unversioned path, answered in the engine's own version: no client version
            # for a newer engine to refuse as too old; the session's own get, where the
            # SDK's timeout is not applied unasked
            reply = self._api.get(f"{self._api.base_url}{path}", timeout=self.timeout_s)
            reply.raise_for_status()
            return True
        except (DockerException, OSError) as exc:
            self.last_error = str(exc)
            return False

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)
