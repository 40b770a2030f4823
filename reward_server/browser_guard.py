"""Requests a web browser sends on a page's behalf are refused unless the operator allows the
page's site: the server's callers are trainers, scripts and proxies, which send neither an
``Origin`` header nor a Host name of a site's.

Without tokens the server knows a caller by its address, and everything on its own machine is
the loopback caller, a browser too. A page can reach a loopback server two ways, and read the
answers: a WebSocket, which browsers open to any origin (they send ``Origin`` and leave the
server to decide), and DNS rebinding, where the page's own name is made to resolve to
127.0.0.1 so its requests are same-origin to the browser (the ``Host`` header still names
the page's site). Either way the page could list the local trainer's sessions, run cells in
them, and use up its caps. So:

- **Host**: on a server bound to loopback, a Host header must be an IP address, a one-label
  name (``localhost``, ``reward``: no site's name is one label), a ``*.localhost`` name, or one
  of ``allowed_hosts``; a server bound elsewhere is reached by whatever names its network
  gives it (a service's DNS name), and checks them only when ``allowed_hosts`` lists them.
- **Origin**: a request that carries one (a browser's) must come from the server's own
  address (its API page at ``/docs``) or one of ``allowed_origins``.

Both answer 403 naming the setting; a WebSocket's handshake is refused the same way.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from reward_server.errors import Forbidden, api_error_response

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
DEFAULT_PORTS = {"http": "80", "ws": "80", "https": "443", "wss": "443"}


def _listed(setting: str) -> frozenset[str] | None:
    """A comma-separated setting as lower-case names; None for '*' (anything)."""
    names = frozenset(n.strip().lower().rstrip("/") for n in setting.split(",") if n.strip())
    return None if "*" in names else names


def split_host(host: str) -> tuple[str, str]:
    """``host[:port]`` (``[v6][:port]`` too) as its name, lower-case without a trailing dot,
    and its port ('' if none)."""
    host = host.strip().lower()
    if host.startswith("["):
        name, _, rest = host[1:].partition("]")
        return name, rest.removeprefix(":")
    name, _, port = host.rpartition(":") if host.count(":") == 1 else (host, "", "")
    return name.rstrip("."), port


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def host_is_safe(name: str) -> bool:
    """Whether no site can own ``name``: an IP address, a one-label name, or a name under
    ``localhost`` (which resolvers answer themselves)."""
    return _is_ip(name) or "." not in name or name == "localhost" or name.endswith(".localhost")


def origin_netloc(origin: str, scheme: str) -> str | None:
    """``origin``'s ``host:port`` with a default port dropped; None when it has no host
    (``null``: a sandboxed page or a file)."""
    parts = urlsplit(origin.strip().lower())
    if not parts.hostname:
        return None
    port = str(parts.port) if parts.port is not None else ""
    if port == DEFAULT_PORTS.get(parts.scheme or scheme, ""):
        port = ""
    name = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{name}:{port}" if port else name


class BrowserGuard:
    """Refuses what a browser sends for a site the operator has not allowed (module docstring).
    ``bound``: the interface the server listens on."""

    def __init__(self, app: ASGIApp, *, bound: str, allowed_hosts: str = "",
                 allowed_origins: str = "") -> None:
        self.app = app
        hosts = _listed(allowed_hosts)
        loopback = bound.strip().lower() in LOOPBACK_NAMES or (
            _is_ip(bound.strip("[]")) and ipaddress.ip_address(bound.strip("[]")).is_loopback)
        # unset on a server reached from elsewhere: its network's names, unknown here
        self.hosts = hosts if hosts or loopback else None
        self.origins = _listed(allowed_origins)

    def refusal(self, scope: Scope) -> Forbidden | None:
        headers = dict(scope["headers"])
        host = headers.get(b"host", b"").decode("latin-1")
        name, port = split_host(host)
        if host and self.hosts is not None and not (host_is_safe(name) or name in self.hosts):
            return Forbidden(f"host: {name[:80]!r} is not this server's name (allowed_hosts); "
                             "a web page's requests are refused")
        origin = headers.get(b"origin")
        if origin is None or self.origins is None:
            return None
        text = origin.decode("latin-1")
        netloc = origin_netloc(text, scope.get("scheme", "http"))
        own = f"[{name}]" if ":" in name else name
        if port and port != DEFAULT_PORTS.get(scope.get("scheme", "http")):
            own = f"{own}:{port}"
        if netloc is not None and (netloc == own or text.strip().lower().rstrip("/")
                                   in self.origins):
            return None
        return Forbidden(f"origin: {text[:80]!r} is not this server's (allowed_origins); a "
                         "web page's requests are refused")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            refused = self.refusal(scope)
            if refused is not None:
                return await api_error_response(refused)(scope, receive, send)
        await self.app(scope, receive, send)
