"""The door in front of a mounted OpenEnv app: who is calling, which of OpenEnv's paths it
may reach, how many environments each caller holds, how long one may sit idle, and what one
message may hold.

An environment is built per WebSocket connection (``episode``) or HTTP call (OpenEnv's
endpoints) by a factory with no arguments, and its ``reset``/``step`` get the message's
fields only: nothing tells the environment whose it is. The caller (``callers``: a token's
name, or a client's address quota) is put in a context variable here, in the connection's
own task, where the environment's ``reset_async``/``step_async`` run and read it.

Only the paths of an episode are served (``HTTP_PATHS``, ``WS_PATHS``): OpenEnv's ``/mcp``
creates sessions of its own (``openenv/session/create``) that no connection holds, so no cap
here counted them and nothing reaped them, and OpenEnv's ``/ws?session_id=`` re-attached such
a session (or one a closed connection left) as whoever held its id. An episode is its
connection (``/ws`` is the server's own: ``episode``).

OpenEnv's own endpoint counted connections server-wide (``max_concurrent_envs``), and its
idle reaper skipped connected sockets, so one caller could hold every place with silent
sockets. Here a caller holds at most ``per_caller`` connections (its quota, as the session
caps count) and the server ``max_open``, counted over both environments (one ``Places``);
past either the handshake is refused with a 429 naming the setting. A connection that sends
nothing for ``idle_s`` is closed, which ends its environment (and its interpreter) as a
client's close would.

A message is JSON text, parsed in one C call that holds the interpreter lock on whichever
thread (``messages``). So before it is parsed it is held to what an HTTP body to the same
route is (``json_shape``, as ``BodyLimit`` holds them): past ``max_message_bytes``, more
arrays and objects or values outside strings than the route's limits (a few MB of ``[]`` or
``0,`` cost seconds of the loop to parse), nesting deeper than ``max_depth`` or a number
longer than ``max_number_chars`` (Python's parser fails on those with its own error text, and
a number's parse grows with the square of its digits), the connection is closed with 1009 and
the limit named; a binary frame is closed with 1003. A long message is read a slice at a
time, and refused at the first slice past a limit.

What a connection pins in memory is held to its caller's bytes (``HeldBytes``): the largest
message it may be sent while it is open (the WebSocket library reads the next message ahead of
the app, or holds the part it has of one: the server's ``ws_max_size`` is this limit, checked
from a frame's header), and the message in hand until the app asks for the next, counted
with the caller's request bodies (``quotas``). Past the caller's or the server's cap the
handshake is refused (429 naming it), or a message in hand closes the connection (1013)."""

from __future__ import annotations

import asyncio
import contextvars
from collections import Counter
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reward_server.callers import Caller, caller_of_scope
from reward_server.errors import (
    ApiError,
    InvalidItems,
    NotServed,
    TooBusy,
    TooManySessions,
    api_error_response,
)
from reward_server.json_shape import JsonShape
from reward_server.quotas import Quotas, quotas_of_scope
from reward_server.settings import ServerSettings

CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "reward_server.environments.caller", default=None)
MESSAGE_TOO_BIG = 1009  # RFC 6455's close codes
UNSUPPORTED_DATA = 1003
GOING_AWAY = 1001
TRY_AGAIN_LATER = 1013
BODY_SETTINGS = ("max_body_bytes_per_caller", "max_body_bytes_in_flight")  # (quotas')
# an episode's paths: the rest of OpenEnv's app (/mcp, the task API, /docs) is not served
HTTP_PATHS = frozenset({"/reset", "/step", "/state", "/schema", "/metadata", "/health"})
WS_PATHS = frozenset({"/ws"})
# A message carries one action: a cell or a response at max_field_bytes, which JSON's escapes
# (\u0000 is six bytes for one) can grow six times over, and an envelope around it
MESSAGE_BYTES_PER_FIELD_BYTE = 6
MESSAGE_ENVELOPE_BYTES = 64 * 1024
SLICE_BYTES = 64 * 1024  # what the shape check reads between two looks at the limits


def current_caller() -> Caller:
    """The caller of the request or connection being served (set by ``EnvironmentGate``)."""
    caller = CALLER.get()
    if caller is None:  # only a route outside the gate could get here: a bug, not a caller's
        raise RuntimeError("no caller: the environment is served outside its EnvironmentGate")
    return caller


def max_message_bytes(settings: ServerSettings) -> int:
    """The longest WebSocket message an environment takes (the gate's limit, and the
    server's ``ws_max_size``, which the WebSocket library applies after decompression)."""
    return settings.max_field_bytes * MESSAGE_BYTES_PER_FIELD_BYTE + MESSAGE_ENVELOPE_BYTES


class Places:
    """Connections held, by caller quota: one for every mounted environment, so the caps
    are what the settings say, not that once per environment."""

    def __init__(self) -> None:
        self.open: Counter[str] = Counter()

    def mine(self, quota: str) -> int:
        return self.open[quota]

    def everyone(self) -> int:
        return sum(self.open.values())

    def take(self, quota: str) -> None:
        self.open[quota] += 1

    def give(self, quota: str) -> None:
        self.open[quota] -= 1
        if not self.open[quota]:
            del self.open[quota]


class HeldBytes:
    """What one connection's messages hold of its caller's and the server's bytes of bodies
    (``quotas``: ``max_body_bytes_per_caller``, ``max_body_bytes_in_flight``): the largest
    message it may be sent, for as long as it is open (the one the WebSocket library reads
    ahead, or is reading, before the app asks), and the message in hand."""

    def __init__(self, quotas: Quotas | None, caller: Caller) -> None:
        self.quotas, self.caller = quotas, caller  # no quotas: a bare app without its lifespan
        self.reserved = self.in_hand = 0

    def reserve(self, size: int) -> None:
        """``size`` for the connection's life, or ``TooBusy``."""
        if self.quotas is not None:
            self.quotas.take_body(self.caller, size)
            self.reserved = size

    def hand(self, size: int) -> tuple[int, str] | None:
        """The message in hand is now ``size`` characters (each a byte or more); its close
        code and reason when that is past a cap."""
        if self.quotas is None:
            return None
        self.quotas.give_body(self.caller, self.in_hand)
        self.in_hand = 0
        if not size:
            return None
        try:
            self.quotas.take_body(self.caller, size)
        except TooBusy as exc:
            setting = next(name for name in BODY_SETTINGS if name in exc.message)
            return TRY_AGAIN_LATER, f"a message of {size} bytes, past {setting}"
        self.in_hand = size
        return None

    def release(self) -> None:
        if self.quotas is not None:
            self.quotas.give_body(self.caller, self.reserved + self.in_hand)
            self.reserved = self.in_hand = 0


class EnvironmentGate:
    """ASGI middleware around one mounted OpenEnv app (see the module docstring)."""

    def __init__(self, app: ASGIApp, *, places: Places, per_caller: int, max_open: int,
                 idle_s: float, max_message_bytes: int, max_containers: int,
                 max_values: int, values_setting: str, max_depth: int,
                 max_number_chars: int, settings_prefix: str = "openenv") -> None:
        self.app = app
        self.places = places
        self.per_caller = per_caller
        self.max_open = max_open
        self.idle_s = idle_s
        self.max_message_bytes = max_message_bytes
        self.max_containers = max_containers
        self.max_values = max_values
        self.values_setting = values_setting  # the setting that raises max_values
        self.max_depth = max_depth
        self.max_number_chars = max_number_chars
        self.prefix = settings_prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        caller = caller_of_scope(scope)
        token = CALLER.set(caller)
        try:
            refusal = self._unserved(scope)
            if refusal is None and scope["type"] == "websocket":
                refusal = self._refusal(caller)
            if refusal is not None:
                return await api_error_response(refusal)(scope, receive, send)
            if scope["type"] == "http":
                return await self.app(scope, receive, send)
            # the app's caps, read before the mount's app puts itself in the scope
            held = HeldBytes(quotas_of_scope(scope), caller)
            try:
                held.reserve(self.max_message_bytes)
            except TooBusy as exc:
                return await api_error_response(TooBusy(
                    f"a connection holds {self.max_message_bytes} bytes (the largest message "
                    f"it may be sent) of its caller's bodies, and {exc.message}",
                    int((exc.headers or {}).get("Retry-After", "1"))))(scope, receive, send)
            self.places.take(caller.quota)
            try:
                receive, send = self._bounded(receive, send, held)
                await self.app(scope, receive, send)
            finally:
                self.places.give(caller.quota)
                held.release()
        finally:
            CALLER.reset(token)

    @staticmethod
    def _unserved(scope: Scope) -> ApiError | None:
        """A path outside an episode's, or an attach to a session by its id: refused."""
        path = scope["path"][len(scope.get("root_path", "")):] or "/"
        served = WS_PATHS if scope["type"] == "websocket" else HTTP_PATHS
        if path not in served:
            return NotServed(f"{path}: not served here; an environment serves "
                             f"{', '.join(sorted(HTTP_PATHS | WS_PATHS))}")
        if scope["type"] == "websocket" and "session_id" in parse_qs(
                scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True):
            return InvalidItems("session_id: an episode is its own connection; attaching to "
                                "a session by its id is not served")
        return None

    def _refusal(self, caller: Caller) -> TooManySessions | None:
        mine, everyone = self.places.mine(caller.quota), self.places.everyone()
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

    def _too_much(self, message: Message) -> tuple[int, str] | None:
        """Why a received message ends the connection (its close code and reason), or None:
        checked before OpenEnv parses it (see the module docstring)."""
        if message.get("bytes") is not None:
            return UNSUPPORTED_DATA, "a binary message: messages are JSON text"
        text = message.get("text") or ""
        if len(text) > self.max_message_bytes:  # (each character is a byte or more)
            return MESSAGE_TOO_BIG, (f"a message of over {self.max_message_bytes} bytes, "
                                     "past the limit")
        body = text.encode("utf-8", "replace")
        if len(body) > self.max_message_bytes:
            return MESSAGE_TOO_BIG, (f"a message of {len(body)} bytes, past the limit of "
                                     f"{self.max_message_bytes}")
        shape = JsonShape(self.max_depth, self.max_number_chars)
        for at in range(0, len(body), SLICE_BYTES):
            shape.feed(body[at:at + SLICE_BYTES])
            refused = self._past_limits(shape)
            if refused is not None:
                return MESSAGE_TOO_BIG, refused
        return None

    def _past_limits(self, shape: JsonShape) -> str | None:
        if shape.containers > self.max_containers:
            return (f"message: more than {self.max_containers} JSON arrays and objects "
                    "(max_json_containers)")
        if shape.values > self.max_values:
            return f"message: more than {self.max_values} JSON values ({self.values_setting})"
        return shape.nesting_refusal("message", f"{self.prefix}_max_json_depth",
                                     f"{self.prefix}_max_json_number_chars")

    def _bounded(self, receive: Receive, send: Send, held: HeldBytes) -> tuple[Receive, Send]:
        """``receive`` with the idle limit, the message limits and the caller's bytes (the
        message in hand counted until the app asks for the next): each ends the connection
        as the client's own disconnect would (the episode then ends), and ``send`` closes
        it with the code and reason that say why."""
        ended: list[tuple[int, str]] = []

        async def bounded() -> Message:
            held.hand(0)  # the message before is answered: the app asks for the next
            try:
                message = await asyncio.wait_for(receive(), self.idle_s)
            except TimeoutError:
                ended.append((GOING_AWAY, f"idle for {self.idle_s:g} s ({self.prefix}_idle_s)"))
                return {"type": "websocket.disconnect", "code": GOING_AWAY}
            if message["type"] == "websocket.receive":
                refused = self._too_much(message)
                if refused is None:
                    refused = held.hand(len(message.get("text") or ""))
                if refused is not None:
                    ended.append(refused)
                    return {"type": "websocket.disconnect", "code": refused[0]}
            return message

        async def closing(message: Message) -> None:
            if message["type"] == "websocket.close" and ended:
                message = {**message, "code": ended[0][0], "reason": ended[0][1][:120]}
            await send(message)

        return bounded, closing
