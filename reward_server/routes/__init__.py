"""One router per resource: meta (health, metrics, verifier list), verify, rewards."""

from starlette.requests import Request


def caller_of(request: Request) -> str:
    """Who sent a request, for the fair gates (``fair_queue``): the client's address. Behind a
    proxy, uvicorn takes it from ``X-Forwarded-For`` when the proxy's address is trusted
    (``FORWARDED_ALLOW_IPS``; the compose stack's nginx overwrites the header, so a client
    cannot name itself)."""
    return request.client.host if request.client is not None else "unknown"
