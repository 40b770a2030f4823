"""The door in front of a mounted OpenEnv app: who is calling, how many environments each
caller holds, and how long one may sit idle.

OpenEnv's server builds an environment per WebSocket connection by calling a factory with
no arguments, and calls its ``reset``/``step`` with the message's fields only: nothing tells
the environment whose it is. The caller (``callers``: a token's name, or a client's address
quota) is put in a context variable here, in the connection's own task, where the
environment's ``reset_async``/``step_async`` run and read it.

OpenEnv's own cap (``max_concurrent_envs``) counts connections server-wide, and its idle
reaper skips connected sockets, so one caller could hold every place with silent sockets.
Here a caller holds at most ``per_caller`` connections (its quota, as the session caps count)
and the server ``max_open``; past either the handshake is refused with a 429 naming the
setting. A connection that sends nothing for ``idle_s`` is closed, which ends its
environment (and its interpreter) as a client's close would. A message longer than
``max_message_bytes`` closes the connection (1009) before it is parsed."""

from __future__ import annotations

import asyncio
import contextvars
from collections import Counter

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reward_server.callers import Caller, caller_of_scope
from reward_server.errors import TooManySessions, api_error_response

CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "reward_server.environments.caller", default=None)
MESSAGE_TOO_BIG = 1009  # RFC 6455's close code
GOING_AWAY = 1001


def current_caller() -> Caller:
    """The caller of the request or connection being served (set by ``EnvironmentGate``)."""
    caller = CALLER.get()
    if caller is None:  # only a route outside the gate could get here: a bug, not a caller's
        raise RuntimeError("no caller: the environment is served outside its EnvironmentGate")
    return caller


class EnvironmentGate:
    """ASGI middleware around one mounted OpenEnv app (see the module docstring)."""

    def __init__(self, app: ASGIApp, *, per_caller: int, max_open: int, idle_s: float,
                 max_message_bytes: int, settings_prefix: str = "openenv") -> None:
        self.app = app
        self.per_caller = per_caller
        self.max_open = max_open
        self.idle_s = idle_s
        self.max_message_bytes = max_message_bytes
        self.prefix = settings_prefix
        self.open: Counter[str] = Counter()  # connections by quota

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        caller = caller_of_scope(scope)
        token = CALLER.set(caller)
        try:
            if scope["type"] == "http":
                return await self.app(scope, receive, send)
            refusal = self._refusal(caller)
            if refusal is not None:
                return await api_error_response(refusal)(scope, receive, send)
            self.open[caller.quota] += 1
            try:
                receive, send = self._bounded(receive, send)
                await self.app(scope, receive, send)
            finally:
                self.open[caller.quota] -= 1
                if not self.open[caller.quota]:
                    del self.open[caller.quota]
        finally:
            CALLER.reset(token)

    def _refusal(self, caller: Caller) -> TooManySessions | None:
        mine, everyone = self.open[caller.quota], sum(self.open.values())
        if mine >= self.per_caller:
            return TooManySessions(
                f"this caller has {mine} environments connected, its limit "
                f"({self.prefix}_max_per_caller={self.per_caller}); close one",
                {"Retry-After": "1"})
        if everyone >= self.max_open:
            return TooManySessions(
                f"the server has {everyone} environments connected, its limit "
                f"({self.prefix}_max_open={self.max_open}); try again when one closes",
                {"Retry-After": "1"})
        return None

    def _bounded(self, receive: Receive, send: Send) -> tuple[Receive, Send]:
        """``receive`` with the idle limit and the message limit: either ends the
        connection as the client's own disconnect would (OpenEnv then ends its
        environment), and ``send`` closes it with the code and reason that say why."""
        ended: list[tuple[int, str]] = []

        async def bounded() -> Message:
            try:
                message = await asyncio.wait_for(receive(), self.idle_s)
            except TimeoutError:
                ended.append((GOING_AWAY, f"idle for {self.idle_s:g} s ({self.prefix}_idle_s)"))
                return {"type": "websocket.disconnect", "code": GOING_AWAY}
            if message["type"] == "websocket.receive":
                size = len(message.get("bytes") or b"")
                text = message.get("text") or ""
                if len(text) * 4 > self.max_message_bytes:
                    size = len(text.encode("utf-8", "replace"))
                if size > self.max_message_bytes:
                    ended.append((MESSAGE_TOO_BIG, f"a message of {size} bytes, past the "
                                  f"limit of {self.max_message_bytes}"))
                    return {"type": "websocket.disconnect", "code": MESSAGE_TOO_BIG}
            return message

        async def closing(message: Message) -> None:
            if message["type"] == "websocket.close" and ended:
                message = {**message, "code": ended[0][0], "reason": ended[0][1][:120]}
            await send(message)

        return bounded, closing
