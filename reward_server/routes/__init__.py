"""One router per resource: meta (health, metrics, verifier list), verify, rewards."""

from starlette.requests import Request


def caller_of(request: Request) -> str:
    """Who sent a request, for the fair gates (``fair_queue``): the client's address. Behind a
    proxy, uvicorn takes it from ``X-Forwarded-For`` only when the proxy is trusted
    (``--forwarded-allow-ips``, none by default; the compose stack's nginx overwrites the
    header, so a client cannot name itself)."""
    return request.client.host if request.client is not None else "unknown"


def body_bytes(request: Request) -> int | None:
    """The body's declared size (the body limit has checked it); None when not declared."""
    declared = request.headers.get("content-length", "")
    return int(declared) if declared.isdigit() else None
