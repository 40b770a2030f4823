"""Errors a client can cause, each with its HTTP status and a message saying what is wrong,
and the one way each is answered: ``{"detail": message}`` with its status and headers
(``api_error_response``), from the app's handlers (``EXCEPTION_HANDLERS``) or from a
middleware that refuses a request before it is routed.

    ApiError
    ├── Unauthorized              401  missing or wrong token (bearer, or Basic's password)
    ├── UnknownVerifier           404  names the verifiers that exist (or the sandbox's absence)
    ├── SessionNotFound           404  no such session, or another caller's (the two look alike)
    ├── NotServed                 404  a path a mounted app has that this server does not serve
    ├── SessionGone               410  the caller's own session, ended: closed, expired, lost
    ├── PayloadTooLarge           413  names the field or limit and the setting that raises it
    ├── InvalidItems              422  one line per bad field, with its path (items[3].answer)
    ├── TooBusy                   429  a cap on what is in flight; Retry-After from the drain rate
    │   └── TooManySessions       429  the caller's session cap or the server's
    ├── InternalError             500  a bug: the request id that finds its traceback in the log
    ├── ServerStopping            503  the server is draining: send it to another replica
    ├── SessionsUnavailable       503  no container could be had for a new session
    └── SandboxUnavailableError   503  /get_reward's queries left unscored (an outage)

Verdicts about a response (wrong, unparseable, timed out) are never errors: they are
results with a status.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.responses import Response


class ApiError(Exception):
    status_code = 400

    def __init__(self, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = headers  # e.g. a 429's Retry-After

    def body(self) -> dict[str, Any]:
        """The answer's JSON."""
        return {"detail": self.message}

    def header_items(self) -> list[tuple[str, str]]:
        """The answer's headers, a name as often as it has values."""
        return list((self.headers or {}).items())


class Unauthorized(ApiError):
    """Both schemes are offered: a client that sends no header of its own (veRL's
    SandboxFusion client) can put the token in its URL, which ``requests`` sends as Basic."""

    status_code = 401
    CHALLENGES = ("Bearer", 'Basic realm="reward_server"')

    def __init__(self) -> None:
        super().__init__("missing or invalid token (Authorization: Bearer <token>, or HTTP "
                         "Basic with the token as the password)")

    def header_items(self) -> list[tuple[str, str]]:
        return [("WWW-Authenticate", challenge) for challenge in self.CHALLENGES]


class Forbidden(ApiError):
    status_code = 403


class UnknownVerifier(ApiError):
    status_code = 404


class SessionNotFound(ApiError):
    status_code = 404


class NotServed(ApiError):
    status_code = 404


class SessionGone(ApiError):
    status_code = 410


class PayloadTooLarge(ApiError):
    status_code = 413


class InvalidItems(ApiError):
    status_code = 422


class TooBusy(ApiError):
    """A cap on what a caller, or the server, may have in flight (``quotas``): nothing of
    the request was taken; ``Retry-After`` says when about enough will have drained."""

    status_code = 429

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message, {"Retry-After": str(retry_after_s)})


class TooManySessions(TooBusy):
    """``Retry-After``: when the first of the sessions in the way would reach its idle TTL."""


class InternalError(ApiError):
    """Anything that escaped the app (a bug; no input should cause one): its request id, in
    the answer's body and header, finds the traceback in the server log."""

    status_code = 500

    def __init__(self, request_id: str) -> None:
        super().__init__(f"internal error (request id {request_id}); the server log has the "
                         "traceback", {"x-request-id": request_id})
        self.request_id = request_id

    def body(self) -> dict[str, Any]:
        return {**super().body(), "request_id": self.request_id}


class ServerStopping(ApiError):
    """Raised to work still waiting for a worker once the server was asked to stop: it
    never ran, and another replica can run it at once (``Retry-After: 1``)."""

    status_code = 503

    def __init__(self) -> None:
        super().__init__("the server is stopping: this request's items did not run; send it "
                         "to another replica", {"Retry-After": "1"})


class SessionsUnavailable(ApiError):
    status_code = 503


class SandboxUnavailableError(ApiError):
    """OpenRLHF's ``/get_reward`` with ``on_unscorable=error``: a reward list cannot say
    null, so an outage that left queries unscored is the request's error."""

    status_code = 503


MAX_KEY_CHARS = 64  # a field is named, not echoed: a caller's key of megabytes is no answer


def location_part(part: Any) -> Any:
    """A part of an error's location as an answer names it: a key cut to its first
    ``MAX_KEY_CHARS`` characters."""
    if isinstance(part, str) and len(part) > MAX_KEY_CHARS:
        return f"{part[:MAX_KEY_CHARS]}… ({len(part)} characters)"
    return part


def format_location(loc: Iterable[Any]) -> str:
    """``("body", "items", 3, "answer")`` → ``items[3].answer``."""
    out = ""
    for part in loc:
        if part == "body" and not out:
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            part = location_part(part)
            out += f".{part}" if out else str(part)
    return out or "body"


def format_validation_errors(errors: Iterable[dict[str, Any]], prefix: Iterable[Any] = ()) -> str:
    lines = []
    for err in errors:
        where = format_location([*prefix, *err.get("loc", ())])
        msg = err.get("msg", "invalid")
        if err.get("type") == "json_invalid":
            ctx = err.get("ctx", {}).get("error", "")
            msg = f"malformed JSON: {ctx}".rstrip(": ")
        lines.append(f"{where}: {msg}")
    return "; ".join(lines[:20]) + (f"; … {len(lines) - 20} more" if len(lines) > 20 else "")


def api_error_response(exc: ApiError) -> Response:
    """The answer to ``exc``: also an ASGI app, for middleware that refuses a request before
    the app's handlers could."""
    response = JSONResponse(exc.body(), status_code=exc.status_code)
    for name, value in exc.header_items():
        response.headers.append(name, value)
    return response


async def api_error_handler(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return api_error_response(exc)


async def validation_error_handler(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    return api_error_response(InvalidItems(format_validation_errors(exc.errors())))


# The app's one exception map (app.py): every ApiError, and FastAPI's own 422
EXCEPTION_HANDLERS: dict[type[Exception], Callable[[Request, Exception], Awaitable[Response]]] = {
    ApiError: api_error_handler,
    RequestValidationError: validation_error_handler,
}
