"""The code-interpreter environment: an episode is one ``/v1/sessions`` session. ``reset``
opens it (an interpreter in a container of its own), each ``step`` runs one cell in it, the
observation is the cell's result, and the environment's end (the client's close, its
connection dropped or idle: ``gate``) closes it.

Everything a session is held to comes from the server's ``Sessions``, not from here: the
caller's and the server's caps (a 429 at reset), the fair gate each cell passes, the cell's
time, memory and output limits, the idle TTL's reaper, and ownership (an episode's session
is its caller's, by the caller the gate found). So the isolation and limits of a cell are
those of ``/v1/sessions`` and ``/run_code``, tested with the same probes.

A step's observation carries the sandbox's provenance block (``provenance``: what ran the
cell, as ``/v1/sessions`` runs and ``/run_code`` answers name it), as the verifier
environment's carries the verifier's.

``reset_async``/``step_async`` run in the connection's task on the server's event loop (the
sync ``reset``/``step`` are never used), and the connection's end awaits ``close_async``
there (``episode``). OpenEnv's HTTP endpoints call ``close`` on the loop, and OpenEnv's own
code may from a thread: so ``close`` hands the session's end to the loop the episode ran on."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable
from typing import Any

from reward_server.callers import Caller
from reward_server.environments.base import LoopEnvironment
from reward_server.environments.gate import current_caller
from reward_server.environments.messages import InvalidFields, validated
from reward_server.environments.models import CodeAction, CodeObservation, CodeState
from reward_server.errors import SessionGone, SessionNotFound, SessionsUnavailable
from reward_server.provenance import Provenances
from reward_server.run_code.session_schemas import CreateSessionRequest, RunCellsRequest
from reward_server.run_code.sessions import Sessions

NO_INTERPRETER = ("no interpreter: reset() opens one. Over HTTP each /reset and /step is an "
                  "environment of its own (OpenEnv's stateless endpoints); an episode is one "
                  "WebSocket connection, as OpenEnv's EnvClient holds")


class CodeInterpreterEnvironment(LoopEnvironment[CodeAction, CodeObservation, CodeState]):
    """One episode's interpreter (see the module docstring)."""

    def __init__(self, sessions: Callable[[], Sessions],
                 provenance: Callable[[], Provenances]) -> None:
        super().__init__()
        # the app's, found when the episode starts (its lifespan makes them)
        self._sessions, self._provenance = sessions, provenance
        self._caller: Caller | None = None
        self._session: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._state = CodeState()

    @property
    def state(self) -> CodeState:
        return self._state

    async def reset_async(self, /, seed: int | None = None, episode_id: str | None = None,
                          **kwargs: Any) -> CodeObservation:
        """A fresh interpreter; ``kwargs``: ``POST /v1/sessions``'s fields (``files``,
        ``memory_limit_MB``, ``idle_ttl_s``), checked as it checks them, on a worker thread
        (files of megabytes)."""
        request = await asyncio.to_thread(validated, CreateSessionRequest, kwargs, ("reset",))
        if episode_id is not None and not isinstance(episode_id, str):
            # checked before the interpreter starts, not by the state after it
            raise InvalidFields("reset.episode_id: a string, or left out")
        caller = current_caller()
        await self._end()  # the last episode's interpreter goes
        info = await self._sessions().create(caller, request)
        self._caller, self._session = caller, info.session_id
        self._loop = asyncio.get_running_loop()
        self._state = CodeState(episode_id=episode_id or uuid.uuid4().hex, step_count=0,
                                session_state=info.state, limits=info.limits.model_dump())
        return CodeObservation(python=info.python)

    async def step_async(self, action: CodeAction, timeout_s: float | None = None,
                         **kwargs: Any) -> CodeObservation:
        if self._session is None or self._caller is None:
            raise SessionGone(NO_INTERPRETER)
        try:
            status, answer = await self._sessions().run(
                self._caller, self._session,
                RunCellsRequest(code=action.code, cell_timeout=action.cell_timeout))
        except SessionGone:  # expired (idle past its TTL) or closed under it
            self._session, self._state.session_state = None, "ended"
            raise
        if status == 503:  # the sandbox failed, nothing the cell did: an error, not a result
            raise SessionsUnavailable(answer.message)
        self._state.step_count += 1
        ended = answer.session is None or answer.session.state != "open"
        self._state.session_state = answer.session.state if answer.session else "lost"
        if ended:
            self._session = None
        cell: dict[str, Any] = {}
        if answer.cells:  # none when the run stopped before its cell (the session ended)
            result = answer.cells[0]
            cell = {"cell_status": result.status, "stdout": result.stdout,
                    "stderr": result.stderr, "display": result.display, "error": result.error,
                    "execution_time": result.execution_time}
        # the session's own container's block (fixed when it was made: an image rebuilt
        # since is not what runs its cells); the process's where the run has none
        block = answer.provenance or self._provenance().sandbox()
        return CodeObservation(status=answer.status, message=answer.message, done=ended,
                               provenance=block and block.model_dump(mode="json"), **cell)

    def close(self) -> None:
        """The episode's session ends on its loop; safe from any thread (see the module
        docstring). The server's own shutdown closes whatever is left."""
        if self._session is None or self._loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is gone: the server stopped
            asyncio.run_coroutine_threadsafe(self._end(), self._loop)

    async def close_async(self) -> None:
        await self._end()

    async def _end(self) -> None:
        session, self._session = self._session, None
        if session is None or self._caller is None:
            return
        with contextlib.suppress(SessionGone, SessionNotFound):  # ended meanwhile
            await self._sessions().close(self._caller, session)
