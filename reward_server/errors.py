"""Errors a client can cause, each with its HTTP status and a message saying what is wrong.

    ApiError
    ├── Unauthorized       401  missing or wrong bearer token
    ├── UnknownVerifier    404  names the verifiers that exist
    ├── PayloadTooLarge    413  names the field or limit and the setting that raises it
    ├── InvalidItems       422  one line per bad field, with its path (items[3].answer)
    ├── TooBusy            429  a cap on what is in flight; Retry-After from the drain rate
    └── ServerStopping     503  the server is draining: send it to another replica

Verdicts about a response (wrong, unparseable, timed out) are never errors: they are
results with a status.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse


class ApiError(Exception):
    status_code = 400

    def __init__(self, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = headers  # e.g. a 429's Retry-After


class Unauthorized(ApiError):
    status_code = 401

    def __init__(self, message: str) -> None:
        super().__init__(message, {"WWW-Authenticate": "Bearer"})


class UnknownVerifier(ApiError):
    status_code = 404


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


class ServerStopping(ApiError):
    """Raised to work still waiting for a worker once the server was asked to stop: it
    never ran, and another replica can run it at once (``Retry-After: 1``)."""

    status_code = 503

    def __init__(self) -> None:
        super().__init__("the server is stopping: this request's items did not run; send it "
                         "to another replica", {"Retry-After": "1"})


def format_location(loc: Iterable[Any]) -> str:
    """``("body", "items", 3, "answer")`` → ``items[3].answer``."""
    out = ""
    for part in loc:
        if part == "body" and not out:
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
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


def api_error_response(exc: ApiError) -> JSONResponse:
    """The answer to ``exc``: also an ASGI app, for middleware that refuses a request."""
    return JSONResponse({"detail": exc.message}, status_code=exc.status_code,
                        headers=exc.headers)


async def api_error_handler(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return api_error_response(exc)


async def validation_error_handler(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return JSONResponse({"detail": format_validation_errors(exc.errors())}, status_code=422)
