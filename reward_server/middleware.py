"""Pure ASGI middleware: bearer auth, body size limit, request metrics.

Pure ASGI (not BaseHTTPMiddleware) so a body is counted as it streams in and a 413 goes out
before a 64 MB upload is buffered."""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reward_server import metrics


async def _send_json(send: Send, status: int, detail: str, headers: list | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({
        "type": "http.response.start", "status": status,
        "headers": [(b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()), *(headers or [])],
    })
    await send({"type": "http.response.body", "body": body})


class BearerAuth:
    """Every route but ``/healthz`` needs ``Authorization: Bearer <token>`` when configured."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == "/healthz":
            return await self.app(scope, receive, send)
        given = dict(scope["headers"]).get(b"authorization", b"")
        if not secrets.compare_digest(given, self.expected):
            return await _send_json(
                send, 401, "missing or invalid bearer token (Authorization: Bearer <token>)",
                [(b"www-authenticate", b"Bearer")],
            )
        await self.app(scope, receive, send)


class _BodyTooLarge(Exception):
    pass


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _message(self) -> str:
        return (f"request body exceeds the limit of {self.max_bytes} bytes "
                "(REWARD_SERVER_MAX_BODY_BYTES); split the batch")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await _send_json(send, 413, self._message())
        received = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _BodyTooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _BodyTooLarge:
            if not started:
                await _send_json(send, 413, self._message())


class RequestMetrics:
    def __init__(self, app: ASGIApp, routes: set[str]) -> None:
        self.app = app
        self.routes = routes

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
            metrics.REQUESTS.labels(route, str(status["code"])).inc()
            metrics.REQUEST_LATENCY.labels(route).observe(time.perf_counter() - started)
