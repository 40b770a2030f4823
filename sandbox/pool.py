"""Container lifecycle: a warm pool of started sandbox containers.

An execution borrows a container, talks to its harness over the attach stream, and gives it
back. A container is replaced at any sign of trouble its program made (a limit hit, a process
left behind, a broken channel): inside a turn (``EnginePool.upkeep``, which the sandbox's fair
gate enters in each of its slots) the replacement is made at the turn's end, after its
verdict, in the slot of the caller whose program spoiled it, so the seconds a removal and a
start take are that caller's, never a neighbour's; outside one, and for wear (``max_uses``
executions; under gVisor, gVisor's own host threads using up its pids headroom,
``_check_headroom``, after each execution; config.py says why), a background task keeps the
pool full. A session's container is none of the pool's: ``create_own`` starts one for it
(in its caller's turn) and ``destroy`` removes it; the warm pool is never drained. Every
container carries two labels: one that marks it ours, and the owner (host, pid and process
start time) so that the next server on this host can remove what a crashed predecessor left
behind. On shutdown the pool removes its own.

A server killed without its shutdown (SIGKILL, the OOM killer, its node lost) need not be
judged by anyone: each container's stdin is closed by the engine when the attach stream that
carried it ends (``StdinOnce``), the harness (PID 1) exits on that end of its jobs, and the
engine removes the exited container (``AutoRemove``). A killed process's sockets are closed
by its kernel at once; a vanished host's, by the engine's TCP keepalive (docs/deploy.md,
Kubernetes). The attach stream is open as long as the pool holds the container, however long
it idles, so no live pool loses one.

One ``ContainerPool`` serves one Docker engine. ``EnginePool`` puts several engines (a list
of DOCKER_HOSTs) behind one acquire/release: their containers share one idle queue, so an
execution takes whichever engine's container is free first and capacity adds up across
machines. The maintainer checks its engine (sandbox/engine_health.py): when the engine goes
away, that pool drops its containers and reports itself unavailable until the engine is back,
and the others carry on. When it is wedged (its ping answered, /info not), its warm
containers serve until spent, nothing is started or removed on it (each call would hold a
thread, and a caller's turn, for the client's 30 s), it reports itself unavailable saying
so, and it is refilled once it serves again.

The Docker SDK is blocking; its calls run on a dedicated thread pool.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

import docker
from docker.errors import (
    APIError,
    DockerException,
    ImageNotFound,
    InvalidVersion,
    NotFound,
)
from docker.types import Ulimit

from sandbox.channel import Channel, ChannelClosed, ChannelTimeout
from sandbox.config import SandboxConfig
from sandbox.engine_health import EngineHealth, EngineState
from sandbox.engine_watch import EngineWatch
from sandbox.errors import SandboxUnavailable
from sandbox.seccomp import is_gvisor, security_opt
from sandbox.tls import engine_client

log = logging.getLogger("sandbox.pool")

LABEL = "verifiable-rewards.sandbox"
OWNER_LABEL = "verifiable-rewards.owner"
# The harness runs as root with these capabilities only; every program it starts drops to
# uid 10001 (which clears them), so no program can signal, prlimit or trace the harness or its
# fork server, and the harness can hand each execution a fresh work dir.
HARNESS_USER = "0:0"
HARNESS_CAPS = ["SETUID", "SETGID", "KILL", "CHOWN"]
T = TypeVar("T")

BUILD_HINT = "run: bash sandbox/build_image.sh"
ENGINE_RECHECK_S = 1.0  # a failed health check is made again after this, before it counts
STATS_RETRY_S = 0.5  # before a gVisor container's unreadable pids count is asked again
ENGINE_HINT = "start the engine (bash sandbox/ensure_docker.sh) or set DOCKER_HOST"
WEDGED_HINT = "restart that dockerd (systemctl restart docker)"


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid())}"


def owner_is_alive(owner: str, running: set[str] | None = None) -> bool:
    """False when ``owner`` is a process of this host that no longer runs, or a process in
    a container of this engine (its hostname is the container's short id, as under
    compose) that no longer runs; other owners are not ours to judge."""
    host, _, rest = owner.partition(":")
    pid, _, started = rest.partition(":")
    if host == socket.gethostname() and pid.isdigit():
        return _start_time(int(pid)) == started
    if running is not None and _CONTAINER_ID.fullmatch(host):
        return host in running
    return True


_CONTAINER_ID = re.compile(r"[0-9a-f]{12}")


@dataclass(eq=False)  # compared and hashed by identity
class PooledContainer:
    container: Any  # docker.models.containers.Container
    channel: Channel
    pool: ContainerPool
    uses: int = 0
    retire: bool = False  # replace instead of reusing (gVisor: its pids headroom is gone)
    checking: bool = False  # a headroom check is in flight
    # what the engine made it of and runs it under, which its results name (a session's
    # container outlives a rebuilt image or a changed default runtime)
    image_id: str | None = None
    runtime: str | None = None
    id: str = field(init=False)

    def __post_init__(self) -> None:
        self.id = self.container.id[:12]


@dataclass(eq=False)
class _Owed:
    """The containers one turn's programs spoiled (``EnginePool.upkeep``): each keeps its
    place in its pool (counted live, so no background task replaces it) until the turn's end
    replaces it."""

    spoiled: list[PooledContainer] = field(default_factory=list)
    open: bool = True  # False once the turn ended: a later spoil is the background's


_OWED: ContextVar[_Owed | None] = ContextVar("sandbox_owed", default=None)


class ContainerPool:
    """The warm containers on one engine (``docker_host``; None: DOCKER_HOST or the local
    socket), put into ``idle`` (shared when several engines serve one server)."""

    def __init__(self, config: SandboxConfig, docker_host: str | None = None,
                 idle: asyncio.Queue[PooledContainer] | None = None,
                 on_state: Callable[[], None] | None = None) -> None:
        self.config = config
        self.docker_host = docker_host
        # what the last check of the engine found (None: not checked yet); ``on_state`` is
        # called on each change (the server's metrics)
        self.state: EngineState | None = None
        self._on_state = on_state
        self.owner = owner_id()
        # whether ``runtime`` is gVisor's, which decides the seccomp profile, the pids limit
        # and the wear checks its containers get (settled with the runtime on connecting)
        self.gvisor = is_gvisor(config.runtime or "")
        self._one_shot_stats = True  # the engine takes stats' one-shot (API 1.41, Docker 20.10)
        self._threads = ThreadPoolExecutor(max_workers=config.pool_size + 4,
                                           thread_name_prefix="sandbox")
        # stats calls wait for the engine's next sample (~1 s): threads of their own, one per
        # container at most, so they never hold up a request
        self._stats_threads = ThreadPoolExecutor(max_workers=config.pool_size,
                                                 thread_name_prefix="sandbox-stats")
        self._client: docker.DockerClient | None = None
        self._health = EngineHealth(docker_host, config.tls_cert_path, config.health_timeout_s)
        # whether the engine dropped its streams (a restart quicker than the checks)
        self.watch = EngineWatch(docker_host, config.tls_cert_path, LABEL)
        self.wedged = False  # the engine answers its ping, not /info (``engine_state``)
        self._idle: asyncio.Queue[PooledContainer] = idle if idle is not None else asyncio.Queue()
        self._mine: set[PooledContainer] = set()  # live containers of this engine, idle or busy
        self._live = 0  # idle + busy + being created or replaced in a turn
        self._own: set[PooledContainer] = set()  # sessions' containers (``create_own``)
        self._wake = asyncio.Event()
        self._maintainer: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._closing = False
        self.unavailable_reason: str | None = "the sandbox pool has not started"
        # the engine's id of the image its containers run (None: not connected yet), which
        # results name as what produced them (reward_server/provenance.py)
        self.image_id: str | None = None
        # the OCI runtime they run under: the setting, or unset the engine's default, which
        # may be gVisor's or any other (None: not connected yet)
        self.runtime: str | None = config.runtime or None

    # --- running blocking SDK calls -------------------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, lambda: fn(*args, **kwargs))

    async def _stats(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._stats_threads, lambda: fn(*args, **kwargs))

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, check the image, reap a predecessor's containers, fill the pool in the
        background. Never raises: a missing engine or image leaves the pool unavailable
        (with the reason) and the maintainer keeps trying."""
        self.watch.start()
        await self._connect(first=True)
        self._maintainer = asyncio.create_task(self._maintain(), name="sandbox-pool")

    def _new_client(self) -> docker.DockerClient:
        return engine_client(self.docker_host, self.config.tls_cert_path)

    async def _connect(self, first: bool = False) -> bool:
        # checked first, within health_timeout_s: a wedged engine would hold the client's
        # first call (/version) for its whole 30 s and be reported as not reachable
        state = await self.engine_state()
        if state == "wedged":
            self._wedge()
            return False
        try:
            if state == "gone":
                raise OSError(self._health.last_error or "no answer to its ping within "
                              f"{self.config.health_timeout_s:g} s")
            if self._client is None:
                self._client = await self._call(self._new_client)
            # what the engine runs a container under unasked, and what each name it knows
            # runs: gVisor may be its default, or registered under a name of the operator's
            info = await self._call(self._client.info)
            self.runtime = self.config.runtime or info.get("DefaultRuntime") or self.runtime
            self.gvisor = is_gvisor(self.runtime or "", info.get("Runtimes"))
        except (DockerException, OSError) as exc:
            self.engine_lost()  # what it held there (a wedged engine's warm containers) too
            self.unavailable_reason = f"Docker engine not reachable ({exc}); {ENGINE_HINT}"
            return False
        try:
            image = await self._call(self._client.images.get, self.config.image)
        except ImageNotFound:
            self.unavailable_reason = (f"sandbox image {self.config.image!r} not found; "
                                       f"{BUILD_HINT}")
            return False
        except (DockerException, OSError) as exc:
            self.unavailable_reason = f"Docker engine error ({exc}); {ENGINE_HINT}"
            return False
        self.image_id = image.id
        # first start, or back after an outage: whatever we had there is gone or stale
        await self._reap_orphans(include_own=first or not self._mine)
        self._unwedge()
        self.unavailable_reason = None  # requests now wait for the containers being made
        return True

    async def _reap_orphans(self, include_own: bool) -> None:
        """Remove sandbox containers whose owner is gone: a crashed predecessor on this
        host, or a server container of this engine that was killed or removed."""
        assert self._client is not None
        try:
            containers = await self._call(self._client.api.containers, all=True,
                                          filters={"label": LABEL})
            running = {c["Id"][:12] for c in await self._call(
                self._client.api.containers, filters={"status": "running"})}
        except (DockerException, OSError) as exc:
            log.warning("could not list sandbox containers: %s", exc)
            return
        # ours that live (a session's kept through a wedge, when no warm one was left)
        live = {p.container.id for p in self._mine | self._own}
        for info in containers:
            owner = (info.get("Labels") or {}).get(OWNER_LABEL, "")
            if info["Id"] in live:
                continue
            if not owner_is_alive(owner, running) or (include_own and owner == self.owner):
                log.info("removing sandbox container %s left by %s", info["Id"][:12], owner)
                await self._remove(self._client.containers.prepare_model({"Id": info["Id"]}))

    async def close(self) -> None:
        """Remove every container this process created, idle or busy."""
        self._closing = True
        self.watch.close()
        if self._maintainer is not None:
            self._maintainer.cancel()
            await asyncio.gather(self._maintainer, return_exceptions=True)
        # checked first, within health_timeout_s: an engine that does not serve (wedged, or
        # not answering at all) would hold each call below, and each background one (a
        # removal, a start), for the client's 30 s
        state = await self._health.state()
        if state != "serves":
            for task in self._background:
                task.cancel()  # its thread's call ends on the client's timeout, unwaited
        await asyncio.gather(*self._background, return_exceptions=True)
        self._health.close()
        if state != "serves":
            # each container's closed stdin ends its harness, the engine removes it
            # (AutoRemove) once it serves, and the next server's reaper what is left
            for pooled in self._mine | self._own:
                pooled.channel.close()
            log.warning("sandbox: Docker engine %s is %s; its containers are left to its "
                        "AutoRemove and the next server's reaper", self.docker_host
                        or "(default)", state)
        elif self._client is None:  # lost it; the engine may be back with our old containers
            try:
                self._client = await self._call(self._new_client)
            except (DockerException, OSError):
                pass
        if self._client is not None and state == "serves":
            try:
                # the engine's list alone: containers.list inspects each one it found, and
                # one removed meanwhile (a replaced container's AutoRemove) failed the whole
                # list, leaving every container of this process behind
                mine = await self._call(self._client.api.containers, all=True,
                                        filters={"label": f"{OWNER_LABEL}={self.owner}"})
                await asyncio.gather(*(self._remove(
                    self._client.containers.prepare_model({"Id": c["Id"]})) for c in mine))
            except (DockerException, OSError) as exc:
                log.warning("could not remove sandbox containers: %s", exc)
        self._threads.shutdown(wait=False, cancel_futures=True)
        self._stats_threads.shutdown(wait=False, cancel_futures=True)

    # --- borrowing ----------------------------------------------------------------------------

    def release(self, pooled: PooledContainer, healthy: bool, by_holder: bool = True) -> None:
        """Back to the pool, or replaced. ``healthy`` False: the execution spoiled it; with
        ``by_holder`` (its program's doing) it is replaced in the holder's turn where there
        is one (``EnginePool.upkeep``); False for what an earlier execution left (a stale
        frame on its channel, a gVisor container worn by its predecessors)."""
        pooled.uses += 1
        if (healthy and not pooled.retire and pooled.uses < self.config.max_uses
                and not self._closing and pooled in self._mine):
            self._idle.put_nowait(pooled)
            if self.gvisor and not pooled.checking:
                pooled.checking = True
                self._spawn(self._check_headroom(pooled))
            return
        self._discard(pooled, charged=not healthy and by_holder)

    async def _check_headroom(self, pooled: PooledContainer) -> None:
        """Under gVisor, after an execution: mark ``pooled`` for replacement when it has fewer
        than ``gvisor_pids_headroom`` free pids. gVisor's host threads pile up with use
        (config.py says why) and the harness inside cannot see them, so they are read from
        outside; an unreadable count is no headroom. The engine answers with its next sample
        (up to ~1 s), so this runs beside the next execution, not before it: a container that
        dies meanwhile is the runner's to re-run (runner.py). A loaded engine sometimes answers
        the stats call with an empty body: it is asked once more before the count is taken
        as unreadable."""
        try:
            free = await self.free_pids(pooled)
            if free is None and not self._closing:
                await asyncio.sleep(STATS_RETRY_S)
                free = await self.free_pids(pooled)
        finally:
            pooled.checking = False
        if free is None or free < self.config.gvisor_pids_headroom:
            log.info("replacing gVisor container %s: %s free pids, %d needed", pooled.id,
                     "unknown" if free is None else free, self.config.gvisor_pids_headroom)
            pooled.retire = True

    def fit_for_reuse(self, pooled: PooledContainer) -> bool:
        """False (and the container replaced) when it was marked for replacement while idle."""
        if not pooled.retire:
            return True
        if pooled in self._mine:
            self._discard(pooled, charged=False)  # wear: not the acquirer's to pay
        return False

    async def free_pids(self, pooled: PooledContainer) -> int | None:
        """The container's pids limit less its pids in use, as the engine's cgroup counts them
        (under gVisor: gVisor's own host threads and stub processes); None if unreadable."""
        client = self._client
        if client is None or self.wedged:  # a wedged engine's stats would wait out the client
            return None
        try:
            if self._one_shot_stats:
                try:
                    stats = await self._stats(client.api.stats, pooled.container.id,
                                              stream=False, one_shot=True)
                except InvalidVersion:
                    self._one_shot_stats = False
            if not self._one_shot_stats:  # an engine before 20.10: a sampled read, ~1-2 s
                stats = await self._stats(client.api.stats, pooled.container.id, stream=False)
            pids = stats["pids_stats"]
            return int(pids.get("limit") or self.config.gvisor_pids_limit) - int(pids["current"])
        except (DockerException, OSError, KeyError, TypeError, ValueError) as exc:
            log.warning("could not read the pids of sandbox container %s: %s", pooled.id, exc)
            return None

    async def create_own(self) -> PooledContainer:
        """A started container of its user's own (a session's), never in the pool: the
        time it takes is its user's (who calls this in its turn), and no warm container is
        taken from anyone. It has the owner label, so ``close`` and a later server's
        reaper remove it too if its user never does (``destroy``)."""
        if self._client is None or self._closing or self.wedged:
            raise SandboxUnavailable(self.unavailable_reason or "the sandbox pool is closing")
        try:
            pooled = await self._create()
        except (DockerException, OSError, ChannelClosed, ChannelTimeout) as exc:
            raise SandboxUnavailable(f"cannot start a sandbox container ({exc}); "
                                     f"{ENGINE_HINT}") from None
        self._own.add(pooled)
        return pooled

    async def destroy(self, pooled: PooledContainer) -> None:
        """Remove a container of ``create_own``'s (its channel closed first)."""
        self._own.discard(pooled)
        pooled.channel.close()
        if not self.wedged:  # wedged: left to its AutoRemove, as in ``_discard``
            await self._remove(pooled.container)

    @property
    def own(self) -> int:
        """Containers of ``create_own``'s not yet destroyed."""
        return len(self._own)

    def _discard(self, pooled: PooledContainer, charged: bool) -> None:
        """Out of the pool, removed and replaced: in the current turn where ``charged`` and
        there is one (``EnginePool.upkeep``), else in the background."""
        if pooled not in self._mine:
            return  # already dropped with its engine
        self._mine.discard(pooled)
        pooled.channel.close()
        owed = _OWED.get()
        if charged and owed is not None and owed.open and not self._closing and \
                not self.wedged:
            owed.spoiled.append(pooled)  # its place kept: counted live until replaced
            return
        self._live -= 1
        self._wake.set()
        if not self.wedged:
            self._spawn(self._remove(pooled.container))
        # wedged: its closed stdin ends the harness, and the engine removes the container
        # (AutoRemove) once it serves again; a removal now would only wait out the client

    async def replace(self, spoiled: PooledContainer) -> None:
        """Remove ``spoiled`` (a place ``_discard`` kept) and start its replacement into the
        pool; when none can be started, the place is given up and the maintainer makes
        it (with its backoff, saying why the pool is unavailable)."""
        fresh: PooledContainer | None = None
        try:
            if not self.wedged:  # wedged since its place was kept: given up (``_discard``)
                await self._remove(spoiled.container)
            if self._client is not None and not self._closing and not self.wedged:
                fresh = await self._create()
        except Exception as exc:  # noqa: BLE001 - whatever failed, the maintainer retries
            log.warning("sandbox: no replacement for container %s: %s", spoiled.id, exc)
        if fresh is not None and (self._client is None or self._closing):
            fresh.channel.close()  # the engine was dropped (or we stop) meanwhile
            self._spawn(self._remove(fresh.container))
            fresh = None
        if fresh is None:
            self._live -= 1
            self._wake.set()
            return
        self._mine.add(fresh)
        self._idle.put_nowait(fresh)

    def _spawn(self, work: Any) -> asyncio.Task[Any]:
        """Run ``work`` (a coroutine) in the background; ``close`` waits for it."""
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def request(self, pooled: PooledContainer, message: dict[str, Any],
                      timeout_s: float) -> dict[str, Any]:
        return await self._call(pooled.channel.request, message, timeout_s)

    # --- keeping the pool full ----------------------------------------------------------------

    async def _maintain(self) -> None:
        backoff = 1.0
        next_reap = time.monotonic() + self.config.reap_interval_s
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
                        self._mine.add(pooled)
                        self._idle.put_nowait(pooled)
                if failures:
                    error = failures[0]
                    if isinstance(error, ImageNotFound):
                        self.unavailable_reason = (
                            f"sandbox image {self.config.image!r} not found; {BUILD_HINT}")
                    elif isinstance(error, SandboxUnavailable):  # refused at its check: says why
                        self.unavailable_reason = f"cannot start sandbox containers: {error}"
                    else:
                        self.unavailable_reason = (
                            f"cannot start sandbox containers ({error}); {ENGINE_HINT}")
                    log.warning("sandbox: %s", self.unavailable_reason)
                    await self._sleep(backoff)
                    backoff = min(backoff * 2, 15.0)
                    continue
                self.unavailable_reason = None
                backoff = 1.0
            await self._sleep(self.config.health_interval_s)
            if self._mine:
                state = await self.settled_state()
                if state == "gone":
                    self.engine_lost()
                    continue
                if state == "wedged":
                    self._wedge()
                    continue
                if self.wedged:  # back, its containers never dropped: serving as before
                    self._unwedge()
                    self.unavailable_reason = None
            if (self._client is not None and not self.wedged
                    and time.monotonic() > next_reap):
                await self._reap_orphans(include_own=False)
                next_reap = time.monotonic() + self.config.reap_interval_s

    async def settled_state(self) -> EngineState:
        """The engine's state, taken as not serving only when two checks a second apart say
        so (the second's verdict). One is not an outage (a busy engine on a loaded machine
        may miss it), and dropping the pool costs every execution in flight."""
        if await self.engine_state() == "serves":
            return "serves"
        await asyncio.sleep(ENGINE_RECHECK_S)
        return await self.engine_state()

    async def engine_alive(self) -> bool:
        """Whether the engine answers its ping (a wedged one does: its containers live),
        asked again a second later before it counts as gone: the answer drops every
        container of the engine, other callers' runs in flight with theirs."""
        for attempt in range(2):
            if self._closing:
                return False
            if await self._health.answers_ping():
                return True
            if attempt == 0:
                await asyncio.sleep(ENGINE_RECHECK_S)
        return False

    async def engine_state(self) -> EngineState:
        """One health check (``EngineHealth.state``)."""
        return "gone" if self._closing else await self._health.state()

    def _found(self, state: EngineState) -> None:
        if state != self.state and not self._closing:  # closing: not the engine's state
            self.state = state
            if self._on_state is not None:
                self._on_state()

    def _wedge(self) -> None:
        """The engine answers its ping, not /info: say so, and make and remove nothing on it
        (``_discard``, ``replace``, ``create_own``, ``free_pids``) until it answers; its warm
        containers serve meanwhile."""
        if not self.wedged:
            log.warning("sandbox: Docker engine %s answers its ping but not /info (wedged); "
                        "its %d warm containers serve until spent", self.docker_host
                        or "(default)", len(self._mine))
        self.wedged = True
        self._found("wedged")
        self.unavailable_reason = (
            f"Docker engine {self.docker_host or '(default)'} answers its ping but not /info "
            f"within {self.config.health_timeout_s:g} s (wedged: its containerd stopped or "
            f"hung), so no sandbox container can be started there; {WEDGED_HINT}")

    def _unwedge(self) -> None:
        if self.wedged:
            log.warning("sandbox: Docker engine %s serves again", self.docker_host or
                        "(default)")
        self.wedged = False
        self._found("serves")

    def engine_lost(self) -> None:
        """The engine went away: its containers with it. Drop them (idle ones leave the
        shared queue), report unavailable, and let the maintainer reconnect."""
        self._found("gone")
        if (self._client is None and not self._mine) or self._closing:
            return
        log.warning("sandbox: Docker engine %s is gone", self.docker_host or "(default)")
        self.unavailable_reason = f"Docker engine not reachable; {ENGINE_HINT}"
        keep = []
        while not self._idle.empty():
            pooled = self._idle.get_nowait()
            if pooled.pool is not self:
                keep.append(pooled)
        for pooled in keep:
            self._idle.put_nowait(pooled)
        for pooled in list(self._mine):
            pooled.channel.close()
        self._live -= len(self._mine)
        self._mine.clear()
        self._client = None
        self.wedged = False  # gone, not wedged: its containers went with it
        self._wake.set()

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
            # detach=False is how the SDK sets StdinOnce: the engine closes the harness's
            # stdin when our attach stream ends, and the harness exits on it; AutoRemove: the
            # engine then removes the container, whether or not this process is still there
            stdin_open=True, tty=False, detach=False, auto_remove=True,
            user=HARNESS_USER,
            network_mode="none",
            read_only=True,
            cap_drop=["ALL"],
            cap_add=HARNESS_CAPS,
            # the runtime settled on connecting, named: a default the engine changes later
            # cannot put a container under a runtime its profile and limits were not made for
            security_opt=list(security_opt(c.seccomp_profile, self.gvisor)),
            runtime=self.runtime,
            pids_limit=c.gvisor_pids_limit if self.gvisor else c.pids_limit,
            mem_limit=f"{c.memory_mb}m",
            memswap_limit=f"{c.memory_mb}m",
            nano_cpus=int(c.cpus * 1e9),
            shm_size="16m",
            tmpfs={"/work": f"rw,exec,nosuid,nodev,size={c.work_tmpfs_mb}m,"
                            "uid=0,gid=0,mode=0755",  # each execution's dir is the candidate's
                   # gVisor mounts a writable /tmp of its own unless the container has one:
                   # read-only, as under runc, so it is no channel between executions
                   "/tmp": "ro,nosuid,nodev,noexec,size=64k",
                   # datasets' checkers, compiled once and kept across executions; root's,
                   # each checker's directory its own uid's: no candidate can write here
                   "/checkers": "rw,exec,nosuid,nodev,size=64m,uid=0,gid=0,mode=0755"},
            ulimits=[Ulimit(name="nofile", soft=c.nofile, hard=c.nofile),
                     Ulimit(name="core", soft=0, hard=0)],
            labels={LABEL: "1", OWNER_LABEL: self.owner},
        )
        try:
            sock = await self._call(
                container.attach_socket,
                params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            channel = Channel(getattr(sock, "_sock", sock), owner=sock)
            await self._call(container.start)
            pong = await self._call(channel.request, {"mode": "ping"}, 30.0)
            if pong.get("status") != "pong":
                raise SandboxUnavailable(f"image {c.image!r} does not run the sandbox harness")
            if not pong.get("isolated"):
                raise SandboxUnavailable(f"image {c.image!r} runs an old harness; {BUILD_HINT}")
            if pong.get("unclean"):
                # a process that is not the harness's (a `docker exec` into the new container
                # before its check, say) or a change the image makes: either is refused
                raise SandboxUnavailable(
                    f"a new container of image {c.image!r} was not clean when its harness "
                    f"checked it ({'; '.join(map(str, pong['unclean']))}); if nothing else "
                    f"runs in the sandbox's containers, {BUILD_HINT}")
            if not pong.get("undumpable"):
                log.warning("sandbox harness could not make itself non-dumpable")
        except (DockerException, OSError, ChannelClosed, ChannelTimeout, SandboxUnavailable):
            await self._remove(container)
            raise
        # the image the tag names now: one rebuilt while the server runs is in new containers
        self.image_id = container.attrs.get("Image") or self.image_id
        return PooledContainer(container, channel, self, image_id=self.image_id,
                               runtime=self.runtime)

    async def _remove(self, container: Any) -> None:
        try:
            await self._call(container.remove, force=True)
        except NotFound:
            pass
        except APIError as exc:
            if exc.status_code != 409:  # 409: the engine is removing it already (AutoRemove)
                log.warning("could not remove sandbox container %s: %s", container.short_id,
                            exc)
        except (DockerException, OSError) as exc:  # OSError: the client's timeout (requests')
            log.warning("could not remove sandbox container %s: %s", container.short_id, exc)

    # --- introspection for tests and metrics -------------------------------------------------

    @property
    def live(self) -> int:
        return self._live

    @property
    def idle(self) -> int:
        return self._idle.qsize()


class EnginePool:
    """Several engines behind one acquire/release (see the module docstring)."""

    def __init__(self, config: SandboxConfig,
                 on_state: Callable[[], None] | None = None) -> None:
        """``on_state``: called when an engine's state changes (``engine_states``)."""
        self.config = config
        hosts = config.docker_hosts or (config.docker_host,)
        # last in, first out: a request's next item gets the container just given back,
        # and a spare beyond what runs at once stays idle until one is being replaced
        self._idle: asyncio.Queue[PooledContainer] = asyncio.LifoQueue()
        self.pools = [ContainerPool(config, host, self._idle, on_state) for host in hosts]

    async def start(self) -> None:
        await asyncio.gather(*(p.start() for p in self.pools))

    async def close(self) -> None:
        await asyncio.gather(*(p.close() for p in self.pools))

    @property
    def unavailable_reason(self) -> str | None:
        """None while any engine can serve; else every engine's reason."""
        reasons = [p.unavailable_reason for p in self.pools]
        if any(r is None for r in reasons):
            return None
        if len(self.pools) == 1:
            return reasons[0]
        return "; ".join(f"{p.docker_host}: {r}" for p, r in zip(self.pools, reasons, strict=True))

    @property
    def engine_states(self) -> dict[EngineState, int]:
        """How many engines the last check of each found serving, wedged and gone."""
        counts: dict[EngineState, int] = {"serves": 0, "wedged": 0, "gone": 0}
        for pool in self.pools:
            if pool.state is not None:
                counts[pool.state] += 1
        return counts

    @property
    def image_ids(self) -> list[str]:
        """The image ids the engines' containers run, each once (several only when the
        engines hold different builds under the same tag)."""
        return sorted({p.image_id for p in self.pools if p.image_id is not None})

    @property
    def runtimes(self) -> list[str]:
        """The OCI runtimes the engines' containers run under, each once (several only when
        the runtime is unset and the engines' defaults differ)."""
        return sorted({p.runtime for p in self.pools if p.runtime is not None})

    @asynccontextmanager
    async def upkeep(self) -> AsyncIterator[None]:
        """Around one turn on the pool (the sandbox's fair gate enters it in each slot): a
        container the turn's program spoiled (``release`` not healthy, ``by_holder``) is
        removed and replaced here, after the turn's body, so after its verdict and never on
        its program's clock, and before the turn ends, so in the slot, and on the share, of
        the caller whose program it was. A turn cancelled meanwhile (its client hung up)
        leaves the replacement to finish in the background."""
        owed = _Owed()
        token = _OWED.set(owed)
        try:
            yield
        finally:
            _OWED.reset(token)
            owed.open = False
            if owed.spoiled:
                await self._replace_owed(owed.spoiled)

    async def _replace_owed(self, spoiled: list[PooledContainer]) -> None:
        async def replace_all() -> None:
            await asyncio.gather(*(p.pool.replace(p) for p in spoiled))

        # a task of the pool's (``close`` waits for it), shielded: cancelling the turn must
        # not leave a place kept that no replacement fills
        await asyncio.shield(spoiled[0].pool._spawn(replace_all()))

    async def create_own(self) -> PooledContainer:
        """A container for a session of its own (``ContainerPool.create_own``), on the engine
        that runs the fewest of them among those that answer."""
        ready = [p for p in self.pools if p._client is not None and p.unavailable_reason is None]
        if not ready:
            raise SandboxUnavailable(self.unavailable_reason or "no Docker engine answers")
        return await min(ready, key=lambda p: p.own).create_own()

    async def acquire(self) -> PooledContainer:
        """An idle container not marked for replacement (``ContainerPool.fit_for_reuse``).
        A turn that spoiled one and runs again (a rerun in a fresh container) first replaces
        what it spoiled: a turn owes one container at most, so the pool always has one for
        every turn (one per slot, and a spare), and turns that each spoiled one cannot all
        wait for a container that only their own ends would make."""
        owed = _OWED.get()
        if owed is not None and owed.spoiled:
            spoiled, owed.spoiled = owed.spoiled, []
            await self._replace_owed(spoiled)
        deadline = time.monotonic() + self.config.acquire_timeout_s
        while True:
            pooled = await self._take(deadline)
            if pooled.pool.fit_for_reuse(pooled):
                return pooled

    async def _take(self, deadline: float) -> PooledContainer:
        try:
            return self._idle.get_nowait()
        except asyncio.QueueEmpty:
            pass
        if self.unavailable_reason is not None and self.live == 0:
            raise SandboxUnavailable(self.unavailable_reason)
        try:
            return await asyncio.wait_for(self._idle.get(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            reason = self.unavailable_reason or "all containers stayed busy"
            raise SandboxUnavailable(
                f"no sandbox container within {self.config.acquire_timeout_s:g} s: {reason}"
            ) from None

    def release(self, pooled: PooledContainer, healthy: bool, by_holder: bool = True) -> None:
        pooled.pool.release(pooled, healthy, by_holder)

    async def request(self, pooled: PooledContainer, message: dict[str, Any],
                      timeout_s: float) -> dict[str, Any]:
        """The job's reply (``Channel.request``), on a thread of the pool's."""
        return await pooled.pool.request(pooled, message, timeout_s)

    async def dropped_by_engine(self, pooled: PooledContainer, mark: int | None) -> bool:
        """Whether ``pooled``'s stream, closed with its engine serving, ended as the engine
        ended every stream after ``mark`` (``EngineWatch``): a restart, never a program's
        doing. The container is then dropped, uncharged."""
        if not await pooled.pool.watch.dropped_since(mark):
            return False
        log.warning("sandbox container %s lost its stream as its engine dropped every "
                    "stream", pooled.id)
        self.release(pooled, healthy=False, by_holder=False)
        return True

    def stalled_under(self, pooled: PooledContainer, since: float) -> bool:
        """Whether ``pooled``'s engine, serving now, stalled after ``since`` (``EngineWatch``):
        a run that timed out then may have answered in time into a stream dockerd held. The
        container is dropped, uncharged."""
        if not pooled.pool.watch.stalled_since(since):
            return False
        log.warning("sandbox container %s gave no answer in time while its engine stalled",
                    pooled.id)
        self.release(pooled, healthy=False, by_holder=False)
        return True

    async def unanswered(self, pooled: PooledContainer, budget_s: float) -> str | None:
        """A container that gave no answer within ``budget_s``: None when its engine serves
        (the silence is the run's); else why the run is not scored, the container dropped
        uncharged (with its whole engine when gone). The harness enforces every limit itself
        and answers, so silence while the engine does not serve (a hung dockerd carries no
        stream; a wedged one sees no container die) is the engine's as likely as the run's."""
        state = await pooled.pool.settled_state()
        if state == "serves":
            return None
        log.warning("sandbox container %s: no answer within %.1f s while its engine is %s",
                    pooled.id, budget_s, state)
        if state == "gone":
            pooled.pool.engine_lost()  # this container with the others
        else:
            self.release(pooled, healthy=False, by_holder=False)
        return (f"no answer from the sandbox within {budget_s:.1f} s while its Docker engine "
                f"was {state}; {self.unavailable_reason or ''}").rstrip("; ")

    async def container_lost(self, pooled: PooledContainer) -> bool:
        """A container's channel closed under a run: True when that was not the program's
        doing: its engine is gone too (that engine's containers are then dropped), or the pool
        had dropped the container itself (``engine_lost``, or its shutdown), whatever the
        engine answers now. A wedged engine's containers live on: their loss is their own."""
        if pooled not in pooled.pool._mine or pooled.pool._closing:
            return True
        if await pooled.pool.engine_alive():
            return False
        pooled.pool.engine_lost()
        return True

    @property
    def live(self) -> int:
        return sum(p.live for p in self.pools)

    @property
    def idle(self) -> int:
        return self._idle.qsize()
