"""One router per resource: meta (health, metrics, verifier list), verify, rewards."""

from starlette.requests import Request

from reward_server.callers import Caller, caller_of_scope


def caller_of(request: Request) -> Caller:
    """Who sent a request, for the fair gates (``fair_queue``) and sessions: the name of its
    token when tokens are configured, else the client's address (``callers``). Behind a
    proxy, uvicorn takes the address from ``X-Forwarded-For`` only when the proxy is trusted
    (``--forwarded-allow-ips``, none by default; the compose stack's nginx overwrites the
    header, so a client cannot name itself)."""
    return caller_of_scope(request.scope)


def body_bytes(request: Request) -> int | None:
    """The body's declared size (the body limit has checked it); None when not declared."""
    declared = request.headers.get("content-length", "")
    return int(declared) if declared.isdigit() else None
