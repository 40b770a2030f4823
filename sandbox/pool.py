"""Container lifecycle: a warm pool of started sandbox containers.

An execution borrows a container, talks to its harness over the attach stream, and gives it
back. A container is replaced after ``max_uses`` executions or at any sign of trouble (a
limit hit, a process left behind, a broken channel), by a background task that keeps the
pool full. Every container carries two labels: one that marks it ours, and the owner (host,
pid and process start time) so that the next server on this host can remove what a crashed
predecessor left behind. On shutdown the pool removes its own.

The Docker SDK is blocking; its calls run on a dedicated thread pool.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import docker
from docker.errors import DockerException, ImageNotFound, NotFound
from docker.types import Ulimit

from sandbox.channel import Channel, ChannelClosed, ChannelTimeout
from sandbox.config import SandboxConfig
from sandbox.errors import SandboxUnavailable

log = logging.getLogger("sandbox.pool")

LABEL = "verifiable-rewards.sandbox"
OWNER_LABEL = "verifiable-rewards.owner"
SANDBOX_UID = "10001:10001"
T = TypeVar("T")

BUILD_HINT = "run: bash sandbox/build_image.sh"
ENGINE_HINT = "start the engine (bash sandbox/ensure_docker.sh) or set DOCKER_HOST"


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid())}"


def owner_is_alive(owner: str) -> bool:
    """True unless ``owner`` is a process of this host that no longer runs."""
    host, _, rest = owner.partition(":")
    pid, _, started = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another host's container: not ours to judge
    return _start_time(int(pid)) == started


@dataclass
class PooledContainer:
    container: Any  # docker.models.containers.Container
    channel: Channel
    uses: int = 0
    id: str = field(init=False)

    def __post_init__(self) -> None:
        self.id = self.container.id[:12]


class ContainerPool:
    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self.owner = owner_id()
        self._threads = ThreadPoolExecutor(max_workers=config.pool_size + 4,
                                           thread_name_prefix="sandbox")
        self._client: docker.DockerClient | None = None
        self._idle: asyncio.Queue[PooledContainer] = asyncio.Queue()
        self._live = 0  # idle + busy + being created
        self._wake = asyncio.Event()
        self._maintainer: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._closing = False
        self.unavailable_reason: str | None = "the sandbox pool has not started"

    # --- running blocking SDK calls -------------------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, lambda: fn(*args, **kwargs))

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, check the image, reap a predecessor's containers, fill the pool in the
        background. Never raises: a missing engine or image leaves the pool unavailable
        (with the reason) and the maintainer keeps trying."""
        await self._connect(first=True)
        self._maintainer = asyncio.create_task(self._maintain(), name="sandbox-pool")

    async def _connect(self, first: bool = False) -> bool:
        try:
            if self._client is None:
                kwargs = {"base_url": self.config.docker_host} if self.config.docker_host else {}
                self._client = await self._call(
                    lambda: docker.DockerClient(**kwargs, timeout=30) if kwargs
                    else docker.from_env(timeout=30))
            await self._call(self._client.ping)
        except (DockerException, OSError) as exc:
            self._client = None
            self.unavailable_reason = f"Docker engine not reachable ({exc}); {ENGINE_HINT}"
            return False
        try:
            await self._call(self._client.images.get, self.config.image)
        except ImageNotFound:
            self.unavailable_reason = (f"sandbox image {self.config.image!r} not found; "
                                       f"{BUILD_HINT}")
            return False
        except (DockerException, OSError) as exc:
            self.unavailable_reason = f"Docker engine error ({exc}); {ENGINE_HINT}"
            return False
        await self._reap_orphans(include_own=first)
        self.unavailable_reason = None  # requests now wait for the containers being made
        return True

    async def _reap_orphans(self, include_own: bool) -> None:
        assert self._client is not None
        try:
            containers = await self._call(self._client.containers.list, all=True,
                                          filters={"label": LABEL})
        except DockerException as exc:
            log.warning("could not list sandbox containers: %s", exc)
            return
        for container in containers:
            owner = container.labels.get(OWNER_LABEL, "")
            if not owner_is_alive(owner) or (include_own and owner == self.owner):
                log.info("removing sandbox container %s left by %s", container.short_id, owner)
                await self._remove(container)

    async def close(self) -> None:
        """Remove every container this process created, idle or busy."""
        self._closing = True
        if self._maintainer is not None:
            self._maintainer.cancel()
            await asyncio.gather(self._maintainer, return_exceptions=True)
        await asyncio.gather(*self._background, return_exceptions=True)
        if self._client is not None:
            try:
                mine = await self._call(self._client.containers.list, all=True,
                                        filters={"label": f"{OWNER_LABEL}={self.owner}"})
                await asyncio.gather(*(self._remove(c) for c in mine))
            except DockerException as exc:
                log.warning("could not remove sandbox containers: %s", exc)
        self._threads.shutdown(wait=False, cancel_futures=True)

    # --- borrowing ----------------------------------------------------------------------------

    async def acquire(self) -> PooledContainer:
        try:
            return self._idle.get_nowait()
        except asyncio.QueueEmpty:
            pass
        if self.unavailable_reason is not None and self._live == 0:
            raise SandboxUnavailable(self.unavailable_reason)
        try:
            return await asyncio.wait_for(self._idle.get(), self.config.acquire_timeout_s)
        except TimeoutError:
            reason = self.unavailable_reason or "all containers stayed busy"
            raise SandboxUnavailable(
                f"no sandbox container within {self.config.acquire_timeout_s:g} s: {reason}"
            ) from None

    def release(self, pooled: PooledContainer, healthy: bool) -> None:
        pooled.uses += 1
        if healthy and pooled.uses < self.config.max_uses and not self._closing:
            self._idle.put_nowait(pooled)
            return
        self._discard(pooled)

    def _discard(self, pooled: PooledContainer) -> None:
        pooled.channel.close()
        self._live -= 1
        self._wake.set()
        task = asyncio.create_task(self._remove(pooled.container))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def request(self, pooled: PooledContainer, message: dict[str, Any],
                      timeout_s: float) -> dict[str, Any]:
        return await self._call(pooled.channel.request, message, timeout_s)

    # --- keeping the pool full ----------------------------------------------------------------

    async def _maintain(self) -> None:
        backoff = 1.0
        while not self._closing:
            deficit = self.config.pool_size - self._live
            if deficit > 0:
                if self._client is None or self.unavailable_reason is not None:
                    if not await self._connect():
                        await self._sleep(backoff)
                        backoff = min(backoff * 2, 15.0)
                        continue
                self._live += deficit
                results = await asyncio.gather(
                    *(self._create() for _ in range(deficit)), return_exceptions=True)
                failures = [r for r in results if isinstance(r, BaseException)]
                self._live -= len(failures)
                for pooled in results:
                    if isinstance(pooled, PooledContainer):
                        self._idle.put_nowait(pooled)
                if failures:
                    error = failures[0]
                    if isinstance(error, ImageNotFound):
                        self.unavailable_reason = (
                            f"sandbox image {self.config.image!r} not found; {BUILD_HINT}")
                    else:
                        self.unavailable_reason = (
                            f"cannot start sandbox containers ({error}); {ENGINE_HINT}")
                    log.warning("sandbox: %s", self.unavailable_reason)
                    await self._sleep(backoff)
                    backoff = min(backoff * 2, 15.0)
                    continue
                self.unavailable_reason = None
                backoff = 1.0
            await self._sleep(None)

    async def _sleep(self, seconds: float | None) -> None:
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), seconds)
        except TimeoutError:
            pass

    async def _create(self) -> PooledContainer:
        assert self._client is not None
        c = self.config
        container = await self._call(
            self._client.containers.create,
            c.image,
            stdin_open=True, tty=False, detach=True,
            user=SANDBOX_UID,
            network_mode="none",
            read_only=True,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            pids_limit=c.pids_limit,
            mem_limit=f"{c.memory_mb}m",
            memswap_limit=f"{c.memory_mb}m",
            nano_cpus=int(c.cpus * 1e9),
            shm_size="16m",
            tmpfs={"/work": f"rw,exec,nosuid,nodev,size={c.work_tmpfs_mb}m,"
                            "uid=10001,gid=10001,mode=0700"},
            ulimits=[Ulimit(name="nofile", soft=c.nofile, hard=c.nofile),
                     Ulimit(name="core", soft=0, hard=0)],
            labels={LABEL: "1", OWNER_LABEL: self.owner},
        )
        try:
            sock = await self._call(
                container.attach_socket,
                params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            channel = Channel(getattr(sock, "_sock", sock))
            await self._call(container.start)
            pong = await self._call(channel.request, {"mode": "ping"}, 30.0)
            if pong.get("status") != "pong":
                raise SandboxUnavailable(f"image {c.image!r} does not run the sandbox harness")
            if not pong.get("undumpable"):
                log.warning("sandbox harness could not make itself non-dumpable")
        except (DockerException, OSError, ChannelClosed, ChannelTimeout, SandboxUnavailable):
            await self._remove(container)
            raise
        return PooledContainer(container, channel)

    async def _remove(self, container: Any) -> None:
        try:
            await self._call(container.remove, force=True)
        except NotFound:
            pass
        except DockerException as exc:
            log.warning("could not remove sandbox container %s: %s", container.short_id, exc)

    # --- introspection for tests and metrics -------------------------------------------------

    @property
    def live(self) -> int:
        return self._live

    @property
    def idle(self) -> int:
        return self._idle.qsize()
