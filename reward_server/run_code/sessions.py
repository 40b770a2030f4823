"""Stateful sessions (``/v1/sessions``, docs/sessions.md): who holds which interpreter, and
the bounds on them. Each session is a ``sandbox.sessions.SandboxSession`` (an interpreter in a
container of its own) plus its owner, its idle clock and its cells' lock.

Errors a caller can meet here (``reward_server.errors``, each a JSON ``detail``):
``SessionNotFound`` (404), ``SessionGone`` (410), ``TooManySessions`` (429) and
``SessionsUnavailable`` (503).

Who: a session belongs to the caller that created it (``callers``: its token's name, or
without tokens its address). Its id is 256 random bits, a capability never listed to anyone
else; another caller's id answers the 404 of an unknown one, word for word.

Bounds: ``session_max_per_caller`` per quota (a token's name, or a client host),
``session_max_open`` in all, of which ``session_reserve`` places are kept for callers that
hold none (each counted with the sessions being created, and with those closed whose
containers are still being removed, so neither a burst nor a loop of open and close can
overshoot); over them a 429 with Retry-After. An idle TTL closed by a reaper task, a cell
time limit and output cap enforced in the container (``harness/session.py``).

Starting a session's container, each cell, and removing the container go through the
sandbox service's fair gate in the caller's turn, as a snippet and a code item do: each holds
one of the gate's slots while it runs (the CPUs the gate shares are the host's, the engine's
work of starting and removing containers included, whichever container it is), so a caller
that opens and closes sessions, or runs cells, gets its share of the slots, not more, and
another caller's item takes the next free one. A session's container is started for it,
never taken from the warm pool (``sandbox.sessions``). None of this can end its turn early as
an item does, so it holds at most all of the gate's slots but one (``unsplit_slot``):
items always find one."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from reward_server import metrics
from reward_server.admission import too_large_message
from reward_server.callers import Caller
from reward_server.errors import (
    InvalidItems,
    PayloadTooLarge,
    ServerStopping,
    SessionGone,
    SessionNotFound,
    SessionsUnavailable,
    TooManySessions,
    UnknownVerifier,
)
from reward_server.fair_queue import BudgetSpent, request_scope
from reward_server.provenance import Provenances, SandboxProvenance
from reward_server.run_code.cell_answer import within
from reward_server.run_code.session_schemas import (
    CellRunResult,
    CreateSessionRequest,
    RunCellsRequest,
    RunCellsResponse,
    SessionInfo,
    SessionLimits,
    SessionState,
)
from reward_server.run_code.session_settings import SessionSettings
from reward_server.run_code.statuses import cell_status
from reward_server.sandbox_service import SandboxService
from reward_server.scoring import Scorer
from sandbox.caller_files import paths_problem
from sandbox.config import capped
from sandbox.errors import SandboxUnavailable
from sandbox.harness.paths import shown
from sandbox.harness.session import TIMEOUT
from sandbox.sessions import INTERRUPT_GRACE_S, CellResult, FetchedFiles, SandboxSession
from sandbox.sessions import SessionLimits as SandboxLimits

log = logging.getLogger("reward_server.sessions")

LANGUAGES = ("python", "python3")
TOMBSTONES = 4096  # ended sessions remembered, so their ids answer 410, not 404
# A session's container ends itself this long after its TTL without a job from the host:
# the host's reaper closes it first unless the server was killed (docs/sessions.md)
IDLE_EXIT_SLACK_S = 60.0
SANDBOX_ERROR = "SandboxError"


@dataclass(eq=False)
class _Session:
    id: str
    caller: Caller
    sandbox: SandboxSession
    limits: SessionLimits
    created_at: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.monotonic)
    cells: int = 0
    running: int = 0  # requests running or waiting for its lock
    state: SessionState = "open"
    why: str = ""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    provenance: SandboxProvenance | None = None  # its container's: what runs its cells
    # one request's own (/run_jupyter): counted against the caps as any session, since it
    # holds a container, but its id is never given out, listed, or remembered after it ends
    transient: bool = False

    def idle_left(self) -> float | None:
        """Seconds until its idle TTL closes it; None while a cell runs or after it ended."""
        if self.state != "open" or self.running:
            return None
        return max(0.0, self.limits.idle_ttl_s - (time.monotonic() - self.last_used))

    def info(self) -> SessionInfo:
        left = self.idle_left()
        left = None if left is None else round(left, 3)
        return SessionInfo(session_id=self.id, language="python", python=self.sandbox.python,
                           state=self.state, cells=self.cells, created_at=self.created_at,
                           expires_in_s=left, limits=self.limits, provenance=self.provenance)


class Sessions:
    """Every open session of this server process; an async context manager (the app's
    lifespan): the reaper runs inside it, and every session is closed when it exits."""

    def __init__(self, scorer: Scorer, sandbox: SandboxService | None,
                 provenance: Provenances | None = None) -> None:
        self.scorer = scorer
        self.sandbox = sandbox  # None: a server without one, where every call says so
        self.provenance = provenance  # each session's block, from its container's
        self._open: dict[str, _Session] = {}
        self._ended: OrderedDict[str, tuple[Caller, SessionState, str]] = OrderedDict()
        self._creating: dict[str, int] = {}  # by quota
        self._removing: dict[str, int] = {}  # by quota: ended, their containers not yet gone
        self._removals: set[asyncio.Task[None]] = set()
        self._reaper: asyncio.Task[None] | None = None
        self._threads: ThreadPoolExecutor | None = None
        self.settings: SessionSettings | None = None

    async def __aenter__(self) -> Sessions:
        if self.sandbox is None:
            return self
        self.settings = self.sandbox.settings
        self._threads = ThreadPoolExecutor(max_workers=max(1, self.settings.session_max_open),
                                           thread_name_prefix="session")
        self._reaper = asyncio.create_task(self._reap(), name="session-reaper")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            await asyncio.gather(self._reaper, return_exceptions=True)
        await asyncio.gather(*(self._end(s, "shutdown", "the server stopped")
                               for s in list(self._open.values())), return_exceptions=True)
        await asyncio.gather(*self._removals, return_exceptions=True)  # the reaper's
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)

    @property
    def open_count(self) -> int:
        return len(self._open)

    def _max_cell_timeout(self, sandbox: SandboxService) -> float:
        """The server's cap, and with one slot at the gate, what leaves an item waiting
        behind the cell its turn within its request's budget."""
        hold = sandbox.unsplit_hold_s
        cap = sandbox.settings.session_max_cell_timeout_s
        return cap if hold is None else min(cap, max(1.0, hold - INTERRUPT_GRACE_S))

    # --- the API ------------------------------------------------------------------------------

    async def create(self, caller: Caller, request: CreateSessionRequest) -> SessionInfo:
        sandbox = self.enabled()
        if request.language.strip().lower() not in LANGUAGES:
            raise InvalidItems(f"language: {request.language[:100]!r} has no session kernel "
                               "here; known: python (python3)")
        files = await self._files(request.files)
        limits = self._limits(sandbox, request.memory_limit_MB, request.idle_ttl_s)
        session = await self._open_session(sandbox, caller, limits, files)
        return session.info()

    @contextlib.asynccontextmanager
    async def transient(self, caller: Caller, memory_limit_MB: int,
                        files: dict[str, str | None]) -> AsyncIterator[_Session]:
        """A fresh interpreter for one request (``/run_jupyter``), ended when it returns:
        admitted, started and counted as any session (it holds a container of its own), but
        never listed nor reachable by an id, and never reaped while the request holds it."""
        sandbox = self.enabled()
        checked = await self._files(files)
        limits = self._limits(sandbox, memory_limit_MB, None)
        session = await self._open_session(sandbox, caller, limits, checked, transient=True)
        session.running += 1
        try:
            yield session
        finally:
            session.running -= 1
            await self._end(session, "closed", "its request ended")

    def _limits(self, sandbox: SandboxService, memory_limit_MB: int,
                idle_ttl_s: float | None) -> SessionLimits:
        settings, config = sandbox.settings, sandbox.config
        return SessionLimits(
            cell_timeout=min(settings.session_cell_timeout_s, self._max_cell_timeout(sandbox)),
            max_cell_timeout=self._max_cell_timeout(sandbox),
            memory_limit_MB=capped(memory_limit_MB if memory_limit_MB > 0 else None,
                                   config.max_memory_mb, config.max_memory_mb),
            output_limit_bytes=settings.session_output_limit_bytes,
            idle_ttl_s=capped(idle_ttl_s, settings.session_idle_ttl_s,
                              settings.session_idle_ttl_s))

    async def _open_session(self, sandbox: SandboxService, caller: Caller,
                            limits: SessionLimits, files: dict[str, str],
                            transient: bool = False) -> _Session:
        settings = sandbox.settings
        self._admit(caller, settings)
        quota = caller.quota
        self._creating[quota] = self._creating.get(quota, 0) + 1
        try:
            interpreter = await self._start(sandbox, caller, limits, files)
        finally:
            self._creating[quota] -= 1
            if not self._creating[quota]:
                del self._creating[quota]
        session = _Session(secrets.token_urlsafe(32), caller, interpreter, limits,
                           transient=transient)
        if self.provenance is not None:
            session.provenance = self.provenance.sandbox_of(interpreter.image_id,
                                                            interpreter.runtime)
        self._open[session.id] = session
        metrics.SESSIONS_OPEN.inc()
        return session

    def info(self, caller: Caller, session_id: str) -> SessionInfo:
        return self._get(caller, session_id).info()

    def of_caller(self, caller: Caller) -> list[SessionInfo]:
        return [s.info() for s in self._open.values() if s.caller == caller and not s.transient]

    async def close(self, caller: Caller, session_id: str) -> SessionInfo:
        session = self._get(caller, session_id)
        await self._end(session, "closed", "closed by DELETE")
        return session.info()

    async def run(self, caller: Caller, session_id: str, request: RunCellsRequest
                  ) -> tuple[int, RunCellsResponse]:
        """The HTTP status and the cells' results (200 whatever the code did; 503 when the
        sandbox failed under it)."""
        sandbox = self.enabled()
        self.check_sizes([("code", request.code)] if request.code is not None else
                          [(f"cells[{i}]", code) for i, code in enumerate(request.sources)])
        session = self._get(caller, session_id)
        time_limit = capped(request.cell_timeout, sandbox.settings.session_cell_timeout_s,
                            self._max_cell_timeout(sandbox))
        session.running += 1
        try:
            async with session.lock:
                self._get(caller, session_id)  # it may have ended while this waited
                return await self._run_cells(sandbox, session, request.sources, time_limit,
                                             caller)
        finally:
            session.running -= 1
            session.last_used = time.monotonic()

    # --- the parts ----------------------------------------------------------------------------

    def enabled(self) -> SandboxService:
        """The sandbox service; UnknownVerifier (a 4xx) when this server runs no sessions."""
        if self.sandbox is None:
            raise UnknownVerifier("sessions and /run_jupyter run in the code verifier's "
                                  "sandbox, which this server does not load (its plugins "
                                  "setting)")
        if self.sandbox.settings.session_max_open == 0:
            raise UnknownVerifier("sessions (and /run_jupyter, which runs on one) are turned "
                                  "off on this server (sandbox_session_max_open is 0)")
        return self.sandbox

    async def _files(self, given: dict[str, str | None]) -> dict[str, str]:
        limit = self.scorer.settings.max_field_bytes
        files = {name: data for name, data in given.items() if data is not None}
        for name, data in files.items():
            if len(data) > limit:
                raise PayloadTooLarge(too_large_message(f"files[{shown(name)}]", len(data), limit))
        why = await paths_problem(files, (), "")
        if why is not None:
            raise InvalidItems(why)
        return files

    def _admit(self, caller: Caller, settings: SessionSettings) -> None:
        """429 past the caller's quota, the server's cap, or into the places kept for
        callers that hold no session."""
        ours = [s for s in self._open.values() if s.caller.quota == caller.quota]
        removing = self._removing.get(caller.quota, 0)
        mine = len(ours) + self._creating.get(caller.quota, 0) + removing
        if mine >= settings.session_max_per_caller:
            raise TooManySessions(
                f"this caller has {mine} sessions open{_being_removed(removing)}, its limit "
                f"(sandbox_session_max_per_caller={settings.session_max_per_caller}); close "
                "one (DELETE /v1/sessions/{id}) or let it expire", _retry_after(ours))
        removing = sum(self._removing.values())
        everyone = len(self._open) + sum(self._creating.values()) + removing
        limit = settings.session_max_open
        why = f"sandbox_session_max_open={limit}"
        reserve = min(settings.session_reserve,
                      max(0, settings.session_max_open - settings.session_max_per_caller))
        if mine and reserve:
            limit -= reserve
            why = (f"its last {reserve} places are kept for callers that hold no session: "
                   f"sandbox_session_reserve={settings.session_reserve}")
        if everyone >= limit:
            raise TooManySessions(
                f"the server has {everyone} sessions open{_being_removed(removing)}, its limit "
                f"for this caller ({why}); "
                "try again when one closes", _retry_after(list(self._open.values())))

    async def _start(self, sandbox: SandboxService, caller: Caller, limits: SessionLimits,
                     files: dict[str, str]) -> SandboxSession:
        assert self._threads is not None
        sandbox_limits = SandboxLimits(limits.memory_limit_MB, limits.output_limit_bytes)
        try:
            with self.scorer.request(caller, 1):
                async with sandbox.unsplit_slot():  # its container is started in it
                    return await SandboxSession.open(
                        sandbox.sandbox.pool, sandbox_limits, self._threads, files,
                        idle_exit_s=limits.idle_ttl_s + IDLE_EXIT_SLACK_S)
        except (SandboxUnavailable, BudgetSpent) as exc:
            raise SessionsUnavailable(f"no sandbox container for a session: {exc}") from None

    def _get(self, caller: Caller, session_id: str) -> _Session:
        session = self._open.get(session_id)
        if session is not None and session.caller == caller and not session.transient:
            return session
        ended = self._ended.get(session_id)
        if ended is not None and ended[0] == caller:
            raise SessionGone(f"session {session_id} has ended ({ended[1]}): {ended[2]}")
        hint = ("; this server runs several worker processes and a session lives in the one "
                "that created it, which calls from its caller's address reach "
                "(docs/sessions.md)" if self.scorer.settings.workers > 1 else "")
        raise SessionNotFound(f"no session {session_id[:64]!r} (unknown, or not this "
                              f"caller's){hint}")

    async def run_transient(self, session: _Session, sources: list[str], cell_timeout: float,
                            total_s: float) -> tuple[int, RunCellsResponse]:
        """A transient session's cells, as Jupyter runs a notebook's: a cell that raises
        does not stop the next (its exception is in its ``error``); a limit, the
        interpreter's death, or ``total_s`` spent (the cells' own time, not their waits at
        the gate) does. Each cell has ``cell_timeout`` (0: the server's) within what is left
        of ``total_s``, capped as a session's cell is."""
        sandbox = self.enabled()
        time_limit = capped(cell_timeout or None, sandbox.settings.session_cell_timeout_s,
                            self._max_cell_timeout(sandbox))
        async with session.lock:
            return await self._run_cells(sandbox, session, sources, time_limit, session.caller,
                                         total_s=total_s)

    async def fetch(self, session: _Session, names: list[str], limit_bytes: int
                    ) -> FetchedFiles:
        """Files of a transient session's work dir, read back through the fair gate as a
        cell runs (the reader is a process in the container); each missing, with the
        reason, when the session is gone or the gate's budget ran out first."""
        sandbox = self.enabled()
        if not names:
            return FetchedFiles()
        if session.state != "open":
            return FetchedFiles(missing=dict.fromkeys(
                names, f"not read: the interpreter's container is gone ({session.why})"))
        try:
            with self.scorer.request(session.caller, 1):
                async with sandbox.unsplit_slot():
                    return await session.sandbox.fetch(names, limit_bytes)
        except (BudgetSpent, SandboxUnavailable) as exc:
            return FetchedFiles(missing=dict.fromkeys(names, f"not read: {exc}"))

    def check_sizes(self, fields: list[tuple[str, str]]) -> None:
        """PayloadTooLarge naming the first of ``(field, code)`` past the server's field
        limit: checked before any container is asked for."""
        limit_bytes = self.scorer.settings.max_field_bytes
        for where, code in fields:
            if len(code) * 4 > limit_bytes and (
                    size := len(code.encode("utf-8", "replace"))) > limit_bytes:
                raise PayloadTooLarge(too_large_message(where, size, limit_bytes))

    def _check_open(self, caller: Caller, session: _Session) -> None:
        """Raise if the session ended while a cell waited (a transient one only at the
        server's shutdown: 503, since its id was never the caller's to use)."""
        if not session.transient:
            self._get(caller, session.id)
        elif session.state != "open":
            raise SessionsUnavailable(f"the interpreter's container is gone ({session.why})")

    async def _run_cells(self, sandbox: SandboxService, session: _Session, sources: list[str],
                         time_limit: float, caller: Caller, total_s: float | None = None
                         ) -> tuple[int, RunCellsResponse]:
        """``total_s`` None: a session's run, which stops at a cell's exception; else a
        notebook's (``run_transient``)."""
        results: list[CellRunResult] = []
        message = ""
        notebook = total_s is not None
        spent = 0.0  # the cells' own seconds, against total_s
        # a request of many cells each at its output limits made an answer of hundreds of MB
        # (stdout and stderr escaped, the display's repr): at /run_code's answer limit the
        # cell that reaches it is cut there, and the cells still to run do not run
        answer, limit = 0, sandbox.config.snippet_response_limit_bytes
        # one request to the gate: its budget bounds the time other callers shut it out
        with self.scorer.request(caller, len(sources)):
            for index, code in enumerate(sources):
                cell_limit = time_limit
                if total_s is not None:
                    cell_limit = min(time_limit, round(total_s - spent, 3))
                    if cell_limit <= 0:
                        message = (f"cells[{index}:] not run: total_timeout of {total_s:g} s "
                                   f"spent by the cells before them")
                        break
                try:
                    async with sandbox.unsplit_slot():  # a cell cannot end its turn early
                        self._check_open(caller, session)  # it may have ended as this waited
                        started = time.perf_counter()
                        cell = await session.sandbox.run(code, cell_limit)
                        spent += time.perf_counter() - started
                except BudgetSpent as exc:  # it never ran: the session stays as it was
                    return 503, RunCellsResponse(status=SANDBOX_ERROR, message=(
                        f"cells[{index}] {exc}"), cells=results, session=session.info(),
                        provenance=session.provenance)
                except SandboxUnavailable as exc:
                    metrics.SESSION_CELLS.labels(SANDBOX_ERROR).inc()
                    await self._end(session, "lost", str(exc))
                    return 503, RunCellsResponse(status=SANDBOX_ERROR, message=str(exc),
                                                 cells=results, session=session.info(),
                                                 provenance=session.provenance)
                message = self._record(session, cell, started, results, keep_going=notebook)
                # measured (and cut) off the loop: a cell's output, escaped, may be megabytes
                results[-1], size, cuts = await asyncio.to_thread(
                    within, results[-1], limit - answer, f"cells[{index}]", limit)
                answer += size
                if message:
                    if not cell.alive:
                        await self._end(session, "lost", message)
                        lost = "interpreter" if notebook else "session"
                        message = f"the {lost} is lost: {message}"
                    if notebook:
                        left = (f" (what was left of total_timeout {total_s:g} s)"
                                if cell.stopped == TIMEOUT and cell_limit < time_limit else "")
                        message = f"cells[{index}]: {message}{left}"
                    message = "; ".join([message, *cuts])
                    break
                if cuts:
                    if index + 1 < len(sources):
                        cuts.append(f"cells[{index + 1}:] not run: the answer is at its limit "
                                    f"of {limit} bytes of the cells' output "
                                    f"(sandbox_snippet_response_limit_bytes); the session is "
                                    f"as cells[{index}] left it")
                    message = "; ".join(cuts)
                    break
        ok = not message
        return 200, RunCellsResponse(status="Success" if ok else "Failed", message=message,
                                     cells=results, session=session.info(),
                                     provenance=session.provenance)

    def _record(self, session: _Session, cell: CellResult, started: float,
                results: list[CellRunResult], keep_going: bool = False) -> str:
        """The cell's result appended; what stops the run ('' for nothing). ``keep_going``:
        a cell's exception does not (a notebook's run goes on past it)."""
        session.cells += 1
        status = cell_status(cell)
        metrics.SESSION_CELLS.labels(status).inc()
        metrics.SESSION_CELL_LATENCY.observe(time.perf_counter() - started)
        results.append(CellRunResult(status=status, execution_time=round(cell.time_s, 6),
                                     stdout=cell.stdout, stderr=cell.stderr,
                                     display=cell.display, error=cell.error))
        if not cell.alive:
            return session.why if session.state != "open" else cell.note or "lost"
        if cell.stopped or (cell.error and not keep_going):
            return cell.note or _raised(cell)
        return ""

    async def _end(self, session: _Session, state: SessionState, why: str) -> None:
        """Forget it (its id answers 410 from now on) and remove its container; returns
        once it is removed (the removal goes on if this is cancelled)."""
        removal = self._forget(session, state, why)
        if removal is not None:
            await asyncio.shield(removal)

    def _forget(self, session: _Session, state: SessionState, why: str
                ) -> asyncio.Task[None] | None:
        """Forget it and start its container's removal (None: ended before). Until the
        removal is done the container counts against the caps, as its caller's."""
        if self._open.pop(session.id, None) is None:
            return None
        session.state, session.why = state, why
        if not session.transient:
            self._ended[session.id] = (session.caller, state, why)
        while len(self._ended) > TOMBSTONES:
            self._ended.popitem(last=False)
        metrics.SESSIONS_OPEN.dec()
        metrics.SESSIONS_CLOSED.labels(state).inc()
        if session.sandbox.busy:  # a cell runs (a DELETE, the shutdown): it ends now
            session.sandbox.hang_up()
        quota = session.caller.quota
        self._removing[quota] = self._removing.get(quota, 0) + 1
        metrics.SESSIONS_REMOVING.inc()
        removal = asyncio.create_task(self._remove(session), name="session-removal")
        self._removals.add(removal)
        removal.add_done_callback(self._removals.discard)
        return removal

    async def _remove(self, session: _Session) -> None:
        """The container removed in its caller's turn at the gate, as one more item of that
        caller's: the engine's seconds are its share, not a neighbour's. Never cut by a
        budget; once the server stops taking turns (its drain), removed at once."""
        assert self.sandbox is not None
        try:
            with contextlib.suppress(Exception):  # a failure: the pool's close removes it
                try:
                    with request_scope(None, session.caller, 1):
                        async with self.sandbox.unsplit_slot(budgeted=False):
                            await session.sandbox.close()
                except ServerStopping:
                    await session.sandbox.close()
        finally:
            metrics.SESSIONS_REMOVING.dec()
            quota = session.caller.quota
            self._removing[quota] -= 1
            if not self._removing[quota]:
                del self._removing[quota]

    async def _reap(self) -> None:
        """Close sessions idle past their TTL, checking a few times per TTL."""
        while True:
            ttl = min((s.limits.idle_ttl_s for s in self._open.values()),
                      default=self.settings.session_idle_ttl_s if self.settings else 60.0)
            await asyncio.sleep(max(0.2, min(5.0, ttl / 4)))
            now = time.monotonic()
            for session in list(self._open.values()):
                idle = now - session.last_used
                if not session.running and idle > session.limits.idle_ttl_s:
                    log.info("session %s of %s expired after %.0f s idle", session.id[:8],
                             session.caller, idle)
                    # removed in its caller's turn: never waited for here, where another
                    # caller's expired session would wait behind it
                    self._forget(session, "expired",
                                 f"no cell for {session.limits.idle_ttl_s:g} s, its idle TTL")


def _being_removed(count: int) -> str:
    return f", {count} of them closed, their containers being removed" if count else ""


def _retry_after(sessions: list[_Session]) -> int:
    """Retry-After: when the first of these would reach its idle TTL (a running one: a TTL
    after now), at least a second."""
    left = [s.idle_left() or s.limits.idle_ttl_s for s in sessions]
    return max(1, math.ceil(min(left, default=1.0)))


def _raised(cell: CellResult) -> str:
    error = cell.error[0] if cell.error else {}
    return f"the cell raised {error.get('ename', 'an exception')}: {error.get('evalue', '')}"
