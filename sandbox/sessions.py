"""A stateful session (``/v1/sessions``): one Python interpreter whose variables outlive each
cell, in a sandbox container of its own. The host half of the harness's session jobs
(``sandbox/harness/session.py``).

The container is started for the session (``EnginePool.create_own``), never taken from the
warm pool (so sessions never drain it, nor make it start replacements for them), with every
hardening a pooled container has (seccomp, capabilities, no network, limits, the runtime).
Its start and its removal are the caller's work: the server runs ``open`` and ``close`` in
that caller's turn at the sandbox's fair gate.
A session's state is the caller's own and lives in that container only; when the session
ends, for whatever reason, the container is removed, never given back: no later execution
can meet what a session left behind.

The channel's blocking calls run on the caller's thread pool (``threads``), not the pool's:
a cell may hold its thread for its whole time limit."""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from sandbox.channel import ChannelClosed, ChannelTimeout
from sandbox.errors import SandboxUnavailable
from sandbox.harness.session import DIED, FINISHED, OUTPUT_LIMIT, TIMEOUT
from sandbox.harness.statuses import OK
from sandbox.pool import EnginePool, PooledContainer

log = logging.getLogger("sandbox.sessions")

ENDINGS = frozenset({FINISHED, TIMEOUT, OUTPUT_LIMIT, DIED})
START_BUDGET_S = 60.0  # the interpreter's start, and its files written (gVisor: seconds)
# After a cell's time limit the interpreter is interrupted and has this long to answer before
# it is killed (harness/session.py): a Python loop answers in milliseconds; what does not
# in a second will not (C code that never checks for signals, SIGINT ignored).
INTERRUPT_GRACE_S = 1.0
# The harness's reader has 5 s (harness/fetch.py); the rest is the channel under gVisor
FETCH_BUDGET_S = 15.0
OUTSIDE_SLACK_S = 10.0  # beyond the cell's limit and grace before we stop waiting from outside


@dataclass(frozen=True)
class SessionLimits:
    """What every cell of a session is allowed (after the server's caps)."""

    memory_mb: int
    output_limit_bytes: int  # stdout, and stderr, each, per cell; a displayed value too


@dataclass(frozen=True)
class CellResult:
    """One cell's end. ``ended``: FINISHED (it ran to its end: its value in ``display``, an
    exception in ``error``, as Jupyter's outputs), or DIED (the interpreter is gone: the
    session with it); ``stopped``: TIMEOUT or OUTPUT_LIMIT when a limit interrupted it;
    ``out_of_memory``: DIED at its memory limit (the kernel killed the interpreter, or the
    container's limit, the backstop, took the container); ``note``: what the sandbox saw, in
    words."""

    ended: str
    stdout: str
    stderr: str
    time_s: float
    display: list[dict[str, Any]] = field(default_factory=list)
    error: list[dict[str, Any]] = field(default_factory=list)
    stopped: str | None = None
    note: str | None = None
    out_of_memory: bool = False

    @property
    def alive(self) -> bool:
        return self.ended != DIED


@dataclass(frozen=True)
class FetchedFiles:
    """Files read back from a session's work dir: ``files`` (base64) the ones read whole,
    ``missing`` why each other was not, ``cut`` those left out for the limit alone, with
    their size in bytes."""

    files: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    cut: dict[str, int] = field(default_factory=dict)


class SandboxSession:
    """One interpreter in a container of its own; ``open`` it, ``run`` cells, ``close`` it."""

    def __init__(self, pooled: PooledContainer, limits: SessionLimits,
                 threads: ThreadPoolExecutor) -> None:
        self._pooled, self.limits, self._threads = pooled, limits, threads
        self.python: str | None = None
        self.closed = False
        self.busy = False  # a job of its is in flight on the channel
        self.hung_up = False  # its channel closed (``hang_up``), its container not yet removed
        # its engine's stream drops when its own stream was last known open (``EngineWatch``)
        self._mark = pooled.pool.watch.mark()

    @property
    def container_id(self) -> str:
        return self._pooled.id

    @property
    def image_id(self) -> str | None:
        """The image its container was made of (the engine's id)."""
        return self._pooled.image_id

    @property
    def runtime(self) -> str | None:
        """The OCI runtime its container runs under."""
        return self._pooled.runtime

    @classmethod
    async def open(cls, pool: EnginePool, limits: SessionLimits, threads: ThreadPoolExecutor,
                   files: Mapping[str, str], idle_exit_s: float) -> SandboxSession:
        """A started interpreter in a container started for it; SandboxUnavailable when
        none could be. The container ends itself after ``idle_exit_s`` without a job (its
        server is gone)."""
        pooled = await pool.create_own()
        session = cls(pooled, limits, threads)
        job = {"mode": "session_start", "files": dict(files), "memory_mb": limits.memory_mb,
               "display_limit_bytes": limits.output_limit_bytes, "idle_exit_s": idle_exit_s}
        try:
            reply = await session._request(job, START_BUDGET_S)
        except (ChannelClosed, ChannelTimeout) as exc:
            await session.close()
            raise SandboxUnavailable(f"the session's container did not start it: {exc}") from None
        except BaseException:
            await session.close()
            raise
        if reply.get("status") != OK or not reply.get("started"):
            await session.close()
            raise SandboxUnavailable(f"the session's interpreter did not start: "
                                     f"{str(reply.get('detail'))[:500]}")
        session.python = reply.get("python")
        return session

    async def run(self, code: str, time_limit_s: float) -> CellResult:
        """Run one cell; a CellResult whatever the code did (DIED: the session is lost);
        SandboxUnavailable when its engine went away under it (nothing the code did)."""
        job = {"mode": "session_cell", "code": code, "time_limit_s": time_limit_s,
               "grace_s": INTERRUPT_GRACE_S, "output_limit_bytes": self.limits.output_limit_bytes}
        budget = time_limit_s + INTERRUPT_GRACE_S + OUTSIDE_SLACK_S
        sent_at = time.monotonic()
        try:
            reply = await self._request(job, budget)
        except ChannelTimeout:
            # the harness interrupts a cell at its limit and answers: no answer while the
            # engine does not serve (a hung dockerd carries no stream), or after it stalled
            # under the cell (the answer held in it), is the engine's doing
            if (state := await self._pooled.pool.settled_state()) != "serves":
                await self.close()
                raise SandboxUnavailable(f"the session's Docker engine is {state}: no answer "
                                         f"within {budget:.1f} s") from None
            if self._pooled.pool.watch.stalled_since(sent_at):
                await self.close()
                raise SandboxUnavailable("the session's Docker engine stalled under the cell: "
                                         f"no answer within {budget:.1f} s") from None
            return CellResult(DIED, "", "", budget, stopped=TIMEOUT,
                              note=f"the sandbox did not answer within {budget:.1f} s")
        except ChannelClosed:
            if self.hung_up or self.closed:
                return CellResult(DIED, "", "", 0.0, note="the session was closed during the "
                                  "cell")
            # (a stream gone before this cell was sent is still the session's: its own
            # earlier cells ran there)
            if not await self._pooled.pool.engine_alive():
                await self.close()
                raise SandboxUnavailable("the session's Docker engine went away") from None
            if await self._pooled.pool.watch.dropped_since(self._mark):
                # the engine ended its own stream too since this one last carried a reply:
                # it stopped or restarted, which no cell can bring about
                await self.close()
                raise SandboxUnavailable("the session's Docker engine dropped its streams "
                                         "(it stopped or restarted)") from None
            return CellResult(DIED, "", "", 0.0, note="the session's container died during "
                              "the cell (its memory limit, the backstop for every process)",
                              out_of_memory=True)
        # decoding up to two streams at the output limit takes a fraction of a second: off
        # the event loop, as the channel's read is
        return await asyncio.get_running_loop().run_in_executor(
            self._threads, _parse, reply, time_limit_s, self.limits)

    async def fetch(self, names: list[str], limit_bytes: int) -> FetchedFiles:
        """The work dir's files ``names``, their base64 within ``limit_bytes`` together,
        read as the candidate with no link followed (``harness/fetch.py``); every name
        missing, with the reason, when the container did not answer."""
        if not names:
            return FetchedFiles()
        job = {"mode": "session_fetch", "fetch_files": list(names),
               "limit_bytes": max(0, limit_bytes)}
        try:
            reply = await self._request(job, FETCH_BUDGET_S)
        except (ChannelClosed, ChannelTimeout) as exc:
            return FetchedFiles(missing=dict.fromkeys(names, f"not read: {exc}"))
        asked = set(names)
        files = {k: v for k, v in _mapping(reply, "files").items()
                 if k in asked and isinstance(v, str)}
        missing = {k: str(v) for k, v in _mapping(reply, "missing").items() if k in asked}
        missing.update((k, "not read") for k in asked - files.keys() - missing.keys())
        cut = {k: v for k, v in _mapping(reply, "cut_files").items()
               if k in asked and isinstance(v, int)}
        return FetchedFiles(files, missing, cut)

    async def _request(self, job: dict[str, Any], budget_s: float) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        self.busy = True
        try:
            reply = await loop.run_in_executor(self._threads, self._pooled.channel.request,
                                               job, budget_s)
        finally:
            self.busy = False
        self._mark = self._pooled.pool.watch.mark()  # its stream carried this reply
        return reply

    def hang_up(self) -> None:
        """Close its channel: a cell blocked on it wakes at once (the session ended under
        it); ``close`` removes the container after."""
        self.hung_up = True
        self._pooled.channel.close()

    async def close(self) -> None:
        """Remove the container (idempotent); a cell blocked on its channel wakes closed."""
        if self.closed:
            return
        self.closed = True
        await self._pooled.pool.destroy(self._pooled)


def _parse(reply: Any, time_limit_s: float, limits: SessionLimits) -> CellResult:
    cell = reply.get("cell") if isinstance(reply, dict) else None
    if not isinstance(cell, dict) or cell.get("ended") not in ENDINGS:
        why = reply.get("detail") if isinstance(reply, dict) else None
        return CellResult(DIED, "", "", 0.0, note=str(why or "the sandbox's answer was "
                                                           "malformed"))
    ended, stopped = cell["ended"], cell.get("stopped")
    out_of_memory = (ended == DIED and not stopped and not cell.get("unstoppable")
                     and bool(cell.get("memory")))
    note = None
    if stopped == TIMEOUT:
        note = f"stopped at the cell's time limit of {time_limit_s:g} s"
    elif stopped == OUTPUT_LIMIT:
        note = (f"stopped at the output limit of {limits.output_limit_bytes} bytes (stdout "
                "or stderr)")
    if ended == DIED:
        why = ("its processes could not all be stopped at the cell's end (a session runs "
               "only while a cell does)" if cell.get("unstoppable") else
               "the interpreter did not stop within "
               f"{INTERRUPT_GRACE_S:g} s of its interrupt and was killed" if stopped else
               f"the interpreter ran out of its memory limit of {limits.memory_mb} MB"
               if out_of_memory else
               f"the interpreter exited (exit code {cell.get('code')})")
        note = f"{note}; {why}" if note else why
    try:
        stdout, stderr = (base64.b64decode(cell[k], validate=True).decode(
            "utf-8", "backslashreplace") for k in ("stdout", "stderr"))
    except (KeyError, TypeError, ValueError):
        stdout = stderr = ""
    return CellResult(ended, stdout, stderr, float(cell.get("time_ms") or 0) / 1000,
                      display=cell.get("display") or [], error=cell.get("error") or [],
                      stopped=stopped, note=note, out_of_memory=out_of_memory)


def _mapping(reply: Any, key: str) -> dict[Any, Any]:
    value = reply.get(key) if isinstance(reply, dict) else None
    return value if isinstance(value, dict) else {}


__all__ = ["CellResult", "FetchedFiles", "SandboxSession", "SessionLimits"]
