"""Pure ASGI middleware: token auth (bearer or Basic), body size limit, request metrics, work
dropped when its client hangs up, and a guard that turns any exception that escapes into a
JSON 500 with a request id.

Pure ASGI (not BaseHTTPMiddleware) so a body is counted as it streams in and a 413 goes out
before a 64 MB upload is buffered."""

from __future__ import annotations

import asyncio
import base64
import binascii
import itertools
import logging
import time
import uuid
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reward_server import metrics
from reward_server.callers import SCOPE_KEY, Tokens, caller_of_scope
from reward_server.errors import (
    ApiError,
    InternalError,
    PayloadTooLarge,
    TooBusy,
    Unauthorized,
    api_error_response,
)
from reward_server.json_shape import JsonShape
from reward_server.quotas import quotas_of_scope

log = logging.getLogger("reward_server")
_RUN_ID = uuid.uuid4().hex[:8]
_request_numbers = itertools.count(1)


async def _refuse(exc: ApiError, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer ``exc`` as the app's handlers would: a middleware refuses before routing."""
    await api_error_response(exc)(scope, receive, send)


class BearerAuth:
    """Every route but ``/healthz`` needs a token when any is configured: ``Authorization:
    Bearer <token>``, or HTTP Basic with the token as the password (any user name). Basic is
    for clients that send no header of their own: veRL's SandboxFusion client posts with
    ``requests``, which turns a URL's ``http://user:<token>@host:port/run_code`` into Basic.
    Each is compared with every token in constant time; the name of the one that matched is
    the request's caller (``callers``)."""

    def __init__(self, app: ASGIApp, tokens: Tokens) -> None:
        self.app = app
        self.tokens = tokens

    def identify(self, given: bytes) -> str | None:
        """The name of the token ``given`` (the Authorization header) carries, or None."""
        scheme, _, credentials = given.partition(b" ")
        if scheme.lower() == b"bearer":
            return self.tokens.identify(credentials)
        if scheme.lower() != b"basic":
            return None
        try:
            decoded = base64.b64decode(credentials.strip(), validate=True)
        except (binascii.Error, ValueError):
            return None
        _, colon, password = decoded.partition(b":")
        return self.tokens.identify(password) if colon else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # a WebSocket handshake (the OpenEnv environments) is refused as a request is
        if scope["type"] not in ("http", "websocket") or scope["path"] == "/healthz":
            return await self.app(scope, receive, send)
        name = self.identify(dict(scope["headers"]).get(b"authorization", b""))
        if name is None:
            return await _refuse(Unauthorized(), scope, receive, send)
        scope[SCOPE_KEY] = name
        await self.app(scope, receive, send)


# (the code environment's /reset is a /v1/sessions body)
SANDBOX_ROUTES = ("/run_code", "/run_jupyter", "/v1/sessions", "/v1/environments/code")
ENVIRONMENT_ROUTES = ("/v1/environments/",)


class BodyLimit:
    """Reads the body up to the limit before the app sees it (the app would buffer it whole
    anyway); a body past the limit, declared or streamed, is answered 413 at once. So is one
    of more JSON containers or values than its limits, counted outside strings as it
    arrives (``json_shape``): bytes do not bound what parsing costs (a million ``[]`` in 3 MB
    held the event loop for seconds), their count does. An environment's body (OpenEnv's
    ``/reset`` and ``/step``) is held besides to the depth and number length its WebSocket
    messages are (``environment_limits``), and every other body to the server's own
    (``json_limits``): deeper than Python's parser goes, or a number longer than it reads,
    is a 413 naming the setting, not the parser's text."""

    def __init__(self, app: ASGIApp, max_bytes: int, max_containers: int | None = None,
                 max_values: int | None = None, sandbox_max_values: int | None = None,
                 json_limits: tuple[int, int] | None = None,
                 environment_limits: tuple[int, int] | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_containers = max_containers
        self.max_values = max_values
        # the sandbox routes' bodies are a program and a few files, not batches: their
        # parse and path checks cost what their values number, so far fewer are let in
        self.sandbox_max_values = sandbox_max_values
        # (max_depth, max_number_chars) of an environment's body: an action needs neither,
        # where a batch's items may (a code test's value 500 deep is refused per item)
        self.environment_limits = environment_limits
        # (max_depth, max_number_chars) of any other body
        self.json_limits = json_limits

    def _message(self) -> str:
        return (f"request body exceeds the limit of {self.max_bytes} bytes "
                "(REWARD_SERVER_MAX_BODY_BYTES); split the batch")

    def _shape(self, path: str) -> tuple[JsonShape, str]:
        """The body's counter, and the prefix of the settings its depth and number limits
        are."""
        if self.environment_limits is not None and path.startswith(ENVIRONMENT_ROUTES):
            return JsonShape(*self.environment_limits), "REWARD_SERVER_OPENENV_"
        return JsonShape(*(self.json_limits or (None, None))), "REWARD_SERVER_"

    def _too_many(self, shape: JsonShape, sandbox: bool, prefix: str) -> str | None:
        containers, values = shape.containers, shape.values
        if self.max_containers is not None and containers > self.max_containers:
            return (f"request body: more than {self.max_containers} JSON arrays and objects "
                    "outside strings (REWARD_SERVER_MAX_JSON_CONTAINERS); split the batch")
        if sandbox and self.sandbox_max_values is not None and values > self.sandbox_max_values:
            return (f"request body: more than {self.sandbox_max_values} JSON values and keys "
                    "(REWARD_SERVER_MAX_SANDBOX_JSON_VALUES)")
        if self.max_values is not None and values > self.max_values:
            return (f"request body: more than {self.max_values} JSON values and keys "
                    "(REWARD_SERVER_MAX_JSON_VALUES); split the batch")
        return shape.nesting_refusal("request body", f"{prefix}MAX_JSON_DEPTH",
                                     f"{prefix}MAX_JSON_NUMBER_CHARS")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        quotas = quotas_of_scope(scope)
        caller = caller_of_scope(scope) if quotas is not None else None
        held = 0  # bytes counted to the caller's and the server's caps on bodies held
        try:
            declared = dict(scope["headers"]).get(b"content-length")
            if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
                return await _refuse(PayloadTooLarge(self._message()), scope, receive, send)
            # (bytes count as they arrive: a declared length alone reserved the server's
            # budget for 60 s with no byte sent)
            chunks: list[bytes] = []
            shape, prefix = self._shape(scope["path"])
            sandbox = scope["path"].startswith(SANDBOX_ROUTES)
            while True:
                message = await receive()
                if message["type"] != "http.request":  # client went away
                    return
                chunk = message.get("body", b"")
                if held + len(chunk) > self.max_bytes:
                    return await _refuse(PayloadTooLarge(self._message()), scope, receive, send)
                if quotas is not None and chunk:
                    try:
                        quotas.take_body(caller, len(chunk))
                    except TooBusy as exc:
                        return await _refuse(exc, scope, receive, send)
                held += len(chunk)
                shape.feed(chunk)
                refused = self._too_many(shape, sandbox, prefix)
                if refused:
                    return await _refuse(PayloadTooLarge(refused), scope, receive, send)
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
            body = b"".join(chunks)
            replayed = False

            async def replay() -> Message:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()  # after the body: wait for http.disconnect

            await self.app(scope, replay, send)
        finally:
            if held and quotas is not None:
                quotas.give_body(caller, held)


DROPPED_KEY = "reward_server.dropped"  # set in the scope of a request whose client hung up


class DropOnHangUp:
    """A client that hangs up before its answer gets none, so its work stops: once the body
    is read, a disconnect cancels the request's handling. Its items still waiting at a gate
    leave the queue; running ones stop (a container is replaced, a math task cancelled) and,
    unfinished, are never cached (``slow_lane``). Without it, a trainer that timed out and
    retried would leave its first batch queued ahead of the retry, run for nobody. Sessions
    are left out: a session outlives the request that runs a cell in it, and a cell cut
    midway would leave the session's state half-changed."""

    def __init__(self, app: ASGIApp, skip_prefixes: tuple[str, ...] = ("/v1/sessions",)
                 ) -> None:
        self.app = app
        self.skip_prefixes = skip_prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["method"] != "POST"
                or scope["path"].startswith(self.skip_prefixes)):
            return await self.app(scope, receive, send)
        body_read = asyncio.Event()

        async def reading() -> Message:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_read.set()
            return message

        async def hung_up() -> None:
            await body_read.wait()
            await receive()  # after the body only http.disconnect comes

        handler = asyncio.ensure_future(self.app(scope, reading, send))
        watch = asyncio.ensure_future(hung_up())
        try:
            await asyncio.wait({handler, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
            if not handler.done():  # the client went first (or the server is stopping)
                handler.cancel()
                scope[DROPPED_KEY] = True
                metrics.REQUESTS_DROPPED.inc()
                await asyncio.gather(handler, return_exceptions=True)
        if not handler.cancelled():
            handler.result()  # its exception, if any, for the guard outside


class RequestMetrics:
    def __init__(self, app: ASGIApp, routes: set[str]) -> None:
        self.app = app
        self.routes = routes
        # a metric's child per label set, found once: ``labels()`` takes a lock and builds
        # a key, a cost per request at thousands a second
        self._counts: dict[tuple[str, str], Any] = {}
        self._latency: dict[str, Any] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        route = scope["path"] if scope["path"] in self.routes else "unmatched"
        status: dict[str, Any] = {"code": 500}
        started = time.perf_counter()

        async def recording_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            if scope.get(DROPPED_KEY):
                status["code"] = 499  # nginx's "client closed request": no answer went out
            key = (route, str(status["code"]))
            if (count := self._counts.get(key)) is None:
                count = self._counts[key] = metrics.REQUESTS.labels(*key)
            if (latency := self._latency.get(route)) is None:
                latency = self._latency[route] = metrics.REQUEST_LATENCY.labels(route)
            count.inc()
            latency.observe(time.perf_counter() - started)


class ErrorGuard:
    """Outermost: an exception that escapes the app (a bug; no input should cause one) becomes
    ``500 {"detail": ..., "request_id": ...}`` and a logged traceback with the same id, instead
    of a bare text 500 or a dropped connection. The id goes out as ``x-request-id`` too."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        # unique per server run without a system call per request (uuid4 reads urandom)
        request_id = f"{_RUN_ID}{next(_request_numbers):08x}"
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            log.exception("request %s %s failed (request id %s)", scope.get("method"),
                          scope.get("path"), request_id)
            if started:  # too late for a status: the client sees a cut-off body
                raise
            await _refuse(InternalError(request_id), scope, receive, send)
